"""``naive`` weight sync: actor and rollout share a process, so tensors are handed over directly."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch

from verl_lite.checkpoint_engine.base import CheckpointEngine, register_checkpoint_engine


@register_checkpoint_engine("naive")
class NaiveCheckpointEngine(CheckpointEngine):
    """The handle is the materialised list of (name, tensor) pairs; nothing leaves the process."""

    placement = "colocated"

    def send_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> list:
        pairs = list(named_tensors)
        self.bytes_sent = sum(t.numel() * t.element_size() for _, t in pairs)
        return pairs

    def receive_weights(self, handle: list, version: int) -> Iterator[tuple[str, torch.Tensor]]:
        yield from handle
