"""Weight sync from training to rollout: the contract, bucketing, and the backend registry.

The training side calls ``send_weights(named_tensors, version)`` on every actor rank (gathering
full tensors is collective) and gets back a small, picklable handle; the rollout side calls
``receive_weights(handle, version)`` and gets (name, tensor) pairs to load. Tensors travel in
buckets of about ``bucket_megabytes`` so memory stays bounded on both sides.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ClassVar

import torch

from verl_lite.utils.registry import Registry

CHECKPOINT_ENGINES: Registry[type[CheckpointEngine]] = Registry("checkpoint engine")


def register_checkpoint_engine(name: str):
    """Class decorator: make a weight-sync backend selectable by ``rollout.checkpoint_engine``."""
    return CHECKPOINT_ENGINES.register(name)


def get_checkpoint_engine(name: str) -> type[CheckpointEngine]:
    """The backend class registered under ``name`` (the error lists the known backends)."""
    return CHECKPOINT_ENGINES.get(name)


class CheckpointEngine(ABC):
    """Carries named tensors from actor ranks to rollout replicas, bucket by bucket."""

    # Where the rollout must live for this backend: "colocated" (in the actor's process, the hybrid
    # placement) or "standalone" (the rollout on its own resource pool).
    placement: ClassVar[str] = "standalone"
    # Whether the trainer drives this backend (validation refuses the others for main_ppo).
    driven_by_trainer: ClassVar[bool] = True

    def __init__(self, bucket_megabytes: int = 512, rank: int = 0):
        self.bucket_bytes = int(bucket_megabytes) * 1024**2
        self.rank = rank

    def offer(self, source: Callable[[], Iterable[tuple[str, torch.Tensor]]]) -> None:
        """Where the training side's weights can be gathered in this process, for engines that pull them on
        the rollout side (``naive``); engines that send ignore it."""

    @abstractmethod
    def send_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> Any:
        """Consume ``named_tensors`` on every actor rank; return a handle for ``receive_weights``."""

    @abstractmethod
    def receive_weights(self, handle: Any, version: int) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield the (name, tensor) pairs described by ``handle``."""


def buckets(
    named_tensors: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Group (name, tensor) pairs into lists of about ``bucket_bytes`` (a large tensor gets its own)."""
    bucket, size = [], 0
    for name, tensor in named_tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket
