"""Latency of a DP_COMPUTE_DATA group call next to raw Ray calls on numpy chunks (the fastest raw path).

Prints a table: payload, median verl_lite latency, median raw-Ray latency and their ratio.
Run: ``python bench/dispatch.py`` (or ``make bench``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import numpy as np
import ray
import torch
from refresh_docs import write_fragment
from tensordict import TensorDict

from verl_lite.single_controller import Dispatch, Worker, register
from verl_lite.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

WORKERS = 4
WARMUP, RUNS = 5, 30


class AddWorker(Worker):
    """Adds one to a float32 column: the same work for both paths."""

    @register(dispatch_mode=Dispatch.DP_COMPUTE_DATA)
    def add(self, batch: TensorDict) -> TensorDict:
        return TensorDict({"y": batch["x"] + 1}, batch_size=batch.batch_size)


@ray.remote(num_cpus=0)
class RawWorker:
    def add(self, chunk: dict) -> dict:
        return {"y": chunk["x"] + 1}


def median_ms_interleaved(fn_a, fn_b) -> tuple[float, float]:
    """Median latency of two callables, alternating them so machine noise hits both alike."""
    for _ in range(WARMUP):
        fn_a()
        fn_b()
    times_a, times_b = [], []
    for _ in range(RUNS):
        for fn, times in ((fn_a, times_a), (fn_b, times_b)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times_a), 1000 * statistics.median(times_b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", help="also write the table to this file (see bench/refresh_docs.py)")
    args = parser.parse_args()
    ray.init(address="local", num_cpus=8, include_dashboard=False, object_store_memory=512 * 1024**2)
    try:
        group = RayWorkerGroup(RayResourcePool([WORKERS]), RayClassWithInitArgs(AddWorker))
        raw = [RawWorker.remote() for _ in range(WORKERS)]
        rows = []
        for label, nbytes in [("1 KB", 1024), ("10 MB", 10 * 1024**2)]:
            n = nbytes // 4 // 16
            x = torch.randn(n, 16)
            batch = TensorDict({"x": x}, batch_size=[n])
            chunks = [{"x": part} for part in np.array_split(x.numpy(), WORKERS)]

            def ours(batch=batch, n=n):
                out = group.add(batch)
                assert len(out) == n

            def baseline(chunks=chunks, n=n):
                outs = ray.get([w.add.remote(c) for w, c in zip(raw, chunks)])
                assert sum(len(o["y"]) for o in outs) == n

            t_ours, t_raw = median_ms_interleaved(ours, baseline)
            rows.append((label, t_ours, t_raw, t_ours / t_raw))
        print(
            f"DP_COMPUTE_DATA over {WORKERS} workers, median of {RUNS} interleaved runs after {WARMUP} warm-up"
        )
        print(f"{'payload':>8} | {'verl_lite ms':>12} | {'raw ray ms':>10} | {'ratio':>6}")
        print("-" * 46)
        for label, a, b, r in rows:
            print(f"{label:>8} | {a:12.2f} | {b:10.2f} | {r:6.2f}")
        if args.markdown:
            write_fragment(
                args.markdown,
                ["payload", "verl_lite ms", "raw Ray ms", "ratio"],
                [[label, f"{a:.2f}", f"{b:.2f}", f"{r:.2f}"] for label, a, b, r in rows],
            )
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
