"""A five-minute tour of the single controller: one driver, three Ray workers, decorated methods.

Run with ``make demo`` (or ``python examples/single_controller_demo.py``).
"""

import os

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a throwaway local cluster; keep auth on real clusters

import ray
import torch
from tensordict import TensorDict

from verl_lite.single_controller import Dispatch, Worker, register
from verl_lite.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup


class Scaler(Worker):
    """Multiplies its shard of a batch and reports which rank did the work."""

    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    @register(dispatch_mode=Dispatch.DP_COMPUTE_DATA)
    def scale(self, batch: TensorDict) -> TensorDict:
        rank = torch.full((len(batch),), self.rank)
        return TensorDict({"y": batch["x"] * self.factor, "rank": rank}, batch_size=batch.batch_size)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def describe(self) -> str:
        return f"rank {self.rank}/{self.world_size} (pid {os.getpid()})"


def main() -> None:
    # "local" starts a fresh Ray even when a `ray start` cluster runs on this machine
    ray.init(address="local", num_cpus=4, include_dashboard=False, object_store_memory=256 * 1024**2)
    try:
        pool = RayResourcePool(process_on_nodes=[3])
        group = RayWorkerGroup(pool, RayClassWithInitArgs(Scaler, factor=2.0))
        for line in group.describe():
            print("worker:", line)
        out = group.scale(TensorDict({"x": torch.arange(7.0)}, batch_size=[7]))
        print("x      :", list(range(7)))
        print("2 * x  :", out["y"].tolist())
        print("by rank:", out["rank"].tolist(), "(7 rows padded to 9, split 3/3/3, padding stripped)")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
