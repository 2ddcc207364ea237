"""Worker classes used by the single-controller tests (importable by Ray worker processes)."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from tensordict import TensorDict

from verl_lite.single_controller import Dispatch, Execute, Worker, make_nd_dispatch, register


class Echo(Worker):
    """Returns what each rank received, so tests can see exactly how arguments were dispatched."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def one_to_all(self, value):
        return (self.rank, value)

    @register(dispatch_mode=Dispatch.ALL_TO_ALL)
    def all_to_all(self, value, shared=None):
        return (self.rank, value, shared)

    @register(dispatch_mode=Dispatch.RANK_ZERO)
    def rank_zero(self, value):
        return (self.rank, value)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def only_rank_zero_runs(self):
        return self.rank

    @register(dispatch_mode=Dispatch.DP_COMPUTE)
    def dp_compute(self, value):
        return (self.rank, value)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_DATA)
    def dp_compute_data(self, batch: TensorDict) -> TensorDict:
        rank = torch.full((len(batch),), self.rank)
        return TensorDict(
            {"y": batch["x"] * 2, "rank": rank, "rows": torch.full((len(batch),), len(batch))},
            batch_size=batch.batch_size,
        )

    @register(dispatch_mode=Dispatch.DP_COMPUTE_DATA, blocking=False)
    def dp_compute_data_async(self, batch: TensorDict) -> TensorDict:
        return TensorDict({"y": batch["x"] + 1}, batch_size=batch.batch_size)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def pid(self) -> int:
        return os.getpid()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def local_rank_here(self) -> int:
        return self.local_rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def fail_on_rank(self, bad_rank: int) -> int:
        if self.rank == bad_rank:
            raise ValueError(f"boom from rank {self.rank}")
        return self.rank


class MeshWorker(Worker):
    """Declares a 2-D mesh: consecutive ranks are tensor-parallel peers of one DP rank."""

    def __init__(self, tp_size: int):
        super().__init__()
        self.register_mesh("actor", dp_rank=self.rank // tp_size, is_collect=self.rank % tp_size == 0)

    @register(dispatch_mode=make_nd_dispatch("actor"))
    def compute(self, batch: TensorDict) -> TensorDict:
        rank = torch.full((len(batch),), self.rank)
        return TensorDict({"x": batch["x"], "rank": rank}, batch_size=batch.batch_size)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def seen(self, batch: TensorDict) -> list:
        return batch["x"].tolist()


class GlooWorker(Worker):
    """Joins a gloo process group through the rendezvous the worker group provides."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def all_reduce_rank(self) -> float:
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://{self.master_addr}:{self.master_port}",
            rank=self.rank,
            world_size=self.world_size,
        )
        value = torch.tensor([float(self.rank + 1)])
        dist.all_reduce(value)
        dist.destroy_process_group()
        return value.item()


class Critic(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def hello(self) -> tuple:
        return ("critic", os.getpid())


class Actor(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def hello(self) -> tuple:
        return ("actor", os.getpid())

    @register(dispatch_mode=Dispatch.DP_COMPUTE_DATA)
    def double(self, batch: TensorDict) -> TensorDict:
        return TensorDict({"y": batch["x"] * 2}, batch_size=batch.batch_size)
