"""``ray`` weight sync: actor rank 0 puts buckets in Ray's object store; every replica reads them.

Works across processes and nodes. Buckets travel as dicts of numpy arrays (Ray's zero-copy
path); the handle is the list of object refs, which is all the controller ever passes on.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import ray
import torch

from verl_lite.checkpoint_engine.base import CheckpointEngine, buckets, register_checkpoint_engine
from verl_lite.transport import numpy_to_tensor, tensor_to_numpy


@register_checkpoint_engine("ray")
class RayCheckpointEngine(CheckpointEngine):
    """Rank 0 owns the buckets; other actor ranks only take part in gathering full tensors."""

    def send_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> list | None:
        refs = []
        for bucket in buckets(named_tensors, self.bucket_bytes):
            if self.rank == 0:
                refs.append(ray.put({name: tensor_to_numpy(tensor) for name, tensor in bucket}))
        return refs if self.rank == 0 else None

    def receive_weights(self, handle: list, version: int) -> Iterator[tuple[str, torch.Tensor]]:
        for ref in handle:
            for name, (array, dtype_name) in ray.get(ref).items():
                yield name, numpy_to_tensor(array, dtype_name)
