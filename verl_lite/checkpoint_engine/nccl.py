"""``nccl`` weight sync: actor rank 0 broadcasts flat GPU buckets to every rollout replica.

The sender and the replicas join a process group of their own (actor rank 0 is rank 0 of it),
rendezvousing through a ``TCPStore`` on the sender's node, so the sync group is independent of
the training group. Every replica must know the tensor layout: ``send_weights`` returns it as
the handle (names, shapes, dtypes per bucket), and the controller passes that handle on while
the broadcasts run (``receive_weights`` is started with the handle, the sender with
``blocking=False``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import timedelta

import torch
import torch.distributed as dist

from verl_lite.checkpoint_engine.base import CheckpointEngine, buckets, register_checkpoint_engine


@register_checkpoint_engine("nccl")
class NcclCheckpointEngine(CheckpointEngine):
    """GPU-to-GPU broadcast of weights in buckets over a dedicated NCCL group."""

    # Its sync group (actor rank 0 + every replica) and the concurrent send/receive are not wired
    # into the trainer yet: main_ppo's standalone placement uses "ray".
    driven_by_trainer = False

    group = None

    def join_group(self, master_addr: str, master_port: int, group_rank: int, group_size: int) -> None:
        """Create (once) the sync group: rank 0 is the sending actor, ranks 1.. the rollout replicas."""
        if not torch.cuda.is_available():
            raise RuntimeError("the nccl checkpoint engine needs CUDA GPUs; use 'ray' or 'naive' on CPU.")
        store = dist.TCPStore(
            master_addr, master_port, group_size, is_master=group_rank == 0, timeout=timedelta(minutes=5)
        )
        options = dist.ProcessGroupNCCL.Options()
        self.group = dist.ProcessGroupNCCL(store, group_rank, group_size, options)
        self.group_rank = group_rank

    @staticmethod
    def layout(named_tensors: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int) -> list[list[tuple]]:
        """(name, shape, dtype) of every tensor, grouped into the buckets they travel in."""
        return [
            [(name, tuple(t.shape), t.dtype) for name, t in bucket]
            for bucket in buckets(named_tensors, bucket_bytes)
        ]

    def send_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> list | None:
        handle = []
        for bucket in buckets(named_tensors, self.bucket_bytes):
            handle.append([(name, tuple(t.shape), t.dtype) for name, t in bucket])
            if self.rank != 0:
                continue
            flat = torch.cat([t.detach().reshape(-1).view(torch.uint8) for _, t in bucket]).cuda()
            self.group.broadcast([flat], 0).wait()
        return handle if self.rank == 0 else None

    def receive_weights(self, handle: list, version: int) -> Iterator[tuple[str, torch.Tensor]]:
        for bucket in handle:
            sizes = [
                int(torch.Size(shape).numel()) * torch.empty((), dtype=dtype).element_size()
                for _, shape, dtype in bucket
            ]
            flat = torch.empty(sum(sizes), dtype=torch.uint8, device="cuda")
            self.group.broadcast([flat], 0).wait()
            offset = 0
            for (name, shape, dtype), size in zip(bucket, sizes):
                yield name, flat[offset : offset + size].view(dtype).view(shape)
                offset += size
