"""``naive`` weight sync: actor and rollout share a process, so the rollout takes the weights itself.

In the hybrid placement the actor's and the rollout's workers are two roles of one process. The policy
worker offers its engine's weights once (``offer``: a function that gathers them); a sync is then a single
call on the rollout side, whose ``receive_weights`` gathers the current weights in place. Nothing but the
version passes through the controller, and on GPUs the tensors stay on the device.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import torch

from verl_lite.checkpoint_engine.base import CheckpointEngine, register_checkpoint_engine

WeightSource = Callable[[], Iterable[tuple[str, torch.Tensor]]]

# this process's weights: what the colocated actor offered (or what send_weights left)
_SOURCE: list[WeightSource] = []


@register_checkpoint_engine("naive")
class NaiveCheckpointEngine(CheckpointEngine):
    """The rollout gathers the weights offered in its own process; the handle is only the version."""

    placement = "colocated"

    def offer(self, source: WeightSource) -> None:
        """Make ``source`` this process's weights: every later ``receive_weights`` gathers from it."""
        _SOURCE[:] = [source]

    def send_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> int:
        pairs = list(named_tensors)
        self.offer(lambda: pairs)
        return int(version)

    def receive_weights(self, handle: int | None, version: int) -> Iterator[tuple[str, torch.Tensor]]:
        """The offered weights, gathered now, on the calling thread (the training thread in hybrid)."""
        if not _SOURCE:
            raise RuntimeError(
                f"naive weight sync: no weights were offered in this process for version {version} "
                "(the naive engine needs the rollout in the actor's process: rollout.mode=hybrid)."
            )
        return iter(list(_SOURCE[0]()))
