"""``naive`` weight sync: actor and rollout share a process, so tensors are handed over directly.

In the hybrid placement the actor's and the rollout's workers are two roles of one process. The
training side leaves the (name, tensor) pairs in this process's mailbox under their version and
returns only that version as the handle, so nothing but an int passes through the controller; the
rollout side in the same process takes them out. On GPUs the tensors stay on the device.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch

from verl_lite.checkpoint_engine.base import CheckpointEngine, register_checkpoint_engine

# version -> the (name, tensor) pairs sent in this process and not yet received
_MAILBOX: dict[int, list[tuple[str, torch.Tensor]]] = {}


@register_checkpoint_engine("naive")
class NaiveCheckpointEngine(CheckpointEngine):
    """The handle is the version; the tensors wait in this process until the rollout takes them."""

    placement = "colocated"

    def send_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> int:
        pairs = list(named_tensors)
        self.bytes_sent = sum(t.numel() * t.element_size() for _, t in pairs)
        _MAILBOX[int(version)] = pairs
        return int(version)

    def receive_weights(self, handle: int, version: int) -> Iterator[tuple[str, torch.Tensor]]:
        pairs = _MAILBOX.pop(int(version), None)
        if pairs is None:
            raise RuntimeError(
                f"naive weight sync: no weights of version {version} were sent in this process "
                "(the naive engine needs the rollout in the actor's process: rollout.mode=hybrid)."
            )
        yield from pairs
