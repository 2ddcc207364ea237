"""Benchmark the KV store: put+get throughput against raw Ray, and bytes through the controller.

Run: ``python bench/kv_store.py`` (starts and stops its own local Ray).

1. Put+get of 256 trajectories x 1024 tokens (int64 ids, float32 log-probs, bool masks), and the
   same at 32x the rows, through the KV store and through a raw ``ray.put``/``ray.get`` of the
   same data as a dict of numpy arrays (Ray's zero-copy path). Target: KV/raw >= 0.7. Measured
   with the store's default index actors (one per node) and with 2 (``--units N ...`` picks).
   Each KV put writes new keys (as rollouts do); the object store is written once before timing.
   Beside them, the *floor*: the same put+get through an index actor that does no work (it takes
   the put's arguments and hands the reference back), i.e. what the two Ray actor calls of any
   store whose control goes through Ray actors cost on this machine; floor/raw bounds KV/raw.
2. One simulated GRPO step: rollout workers put trajectories, the controller's ReplayBuffer
   samples them from tags, trainer workers read fields and write ``old_log_probs``. Reported:
   bytes that crossed the controller process (tensor bytes per the store's accounting, plus the
   pickled keys/tags/metas it sent and received) as a share of trajectory bytes. Target: < 1%.
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import numpy as np
import ray
import torch
from refresh_docs import write_fragment
from tensordict import TensorDict

from verl_lite.kv import (
    KVBatchMeta,
    get_kv_client,
    init_kv_store,
    shutdown_kv_store,
)
from verl_lite.kv.columns import columns_of, row_nbytes, schema_of
from verl_lite.protocol import to_jagged
from verl_lite.trainer.ppo.replay_buffer import ReplayBuffer, ReplayBufferConfig
from verl_lite.trajectory import trajectory_key, trajectory_tag

SEQ_LEN = 1024
BASE_ROWS = 256
OBJECT_STORE_BYTES = 2 * 1024**3


def make_arrays(rows: int, seq_len: int = SEQ_LEN, seed: int = 0) -> dict[str, np.ndarray]:
    """Token ids, log-probs and masks of ``rows`` trajectories, as numpy arrays."""
    rng = np.random.default_rng(seed)
    return {
        "input_ids": rng.integers(0, 32000, size=(rows, seq_len), dtype=np.int64),
        "old_log_probs": rng.standard_normal((rows, seq_len), dtype=np.float32),
        "attention_mask": np.ones((rows, seq_len), dtype=bool),
    }


def warm_object_store(capacity: int, block: int = 64 * 1024**2) -> None:
    """Write (nearly) the whole object store once, then free it.

    ``RAY_preallocate_plasma_memory`` does not make every page resident here: the first pass of
    the store's allocator over a region still pays page faults (109 MB puts measured 33-38 ms on
    the first pass, 11-14 ms afterwards). Without this, whichever path first allocates a region
    pays for it, and the 32x size's few repetitions measure page faults rather than either path.
    """
    held = [ray.put(np.ones(block // 8)) for _ in range(int(capacity * 0.9) // block)]
    del held


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


@ray.remote(num_cpus=0)
class FloorIndex:
    """An index actor with no bookkeeping: same calls and arguments as the store's, no work in them."""

    def put(self, partition_id, keys, tags, specs, boxed_ref, rows, client) -> dict:
        self.ref = boxed_ref[0]  # held, as the store's index holds it (Ray counts a borrower)
        return {"tags": None, "fields": list(specs)}

    def get(self, partition_id, keys, fields, client) -> dict:
        return {"refs": {0: self.ref}}


def floor_put_get(floor, keys: list[str], td: TensorDict) -> dict:
    """A put then a get of ``td`` through ``floor``: Ray's part of a KV put+get."""
    columns = columns_of(td)
    specs = {name: (tuple(schema_of(col)), row_nbytes(col)) for name, col in columns.items()}
    ray.get(floor.put.remote("bench", keys, None, specs, [ray.put(columns)], None, "floor"))
    return ray.get(ray.get(floor.get.remote("bench", keys, None, "floor"))["refs"][0])


def bench_throughput(client, floor, rows: int, repeats: int, warmup: int = 2) -> dict[str, float]:
    """Milliseconds per put+get through raw Ray, the KV store and the floor, for ``rows`` trajectories.

    Runs alternate between the paths so all see the same background load; medians are kept.
    """
    arrays = make_arrays(rows)
    td = TensorDict({k: torch.from_numpy(v) for k, v in arrays.items()}, batch_size=[rows])
    raw, put, get, floor_s = [], [], [], []
    for i in range(warmup + repeats):
        start = time.perf_counter()
        out = ray.get(ray.put(arrays))
        raw_s = time.perf_counter() - start
        assert out["input_ids"].shape == (rows, SEQ_LEN)
        del out
        # New keys every time, as rollouts write new trajectories (the client remembers recent key lists).
        keys = [trajectory_key(f"i{i}-u{j // 4}", j % 4) for j in range(rows)]
        start = time.perf_counter()
        meta = client.kv_batch_put(keys, "bench", fields=td)
        put_s = time.perf_counter() - start
        back = client.kv_batch_get(meta.keys, "bench")
        get_s = time.perf_counter() - start - put_s
        assert back["input_ids"].shape == (rows, SEQ_LEN)
        del back
        client.kv_clear(keys, "bench")  # freeing is untimed, as raw Ray frees when the ref drops
        start = time.perf_counter()
        out = floor_put_get(floor, keys, td)
        floor_one = time.perf_counter() - start
        assert out["input_ids"][1].shape == (rows, SEQ_LEN)  # a dense column: ("dense", array, dtype)
        del out
        if i >= warmup:
            raw.append(raw_s)
            put.append(put_s)
            get.append(get_s)
            floor_s.append(floor_one)
    return {
        "rows": rows,
        "nbytes": sum(a.nbytes for a in arrays.values()),
        "raw_ms": median_ms(raw),
        "put_ms": median_ms(put),
        "get_ms": median_ms(get),
        "kv_ms": median_ms([p + g for p, g in zip(put, get)]),
        "floor_ms": median_ms(floor_s),
    }


def print_throughput(results: list[dict[str, float]]) -> None:
    print("\nput+get of one batch: KV store vs raw ray.put/ray.get of a numpy dict")
    print(
        f"{'units':>5} {'rows x tokens':>14} {'MB':>7} {'raw ms':>8} {'raw GB/s':>9} {'KV put':>8} {'KV get':>8} "
        f"{'KV ms':>8} {'KV GB/s':>8} {'KV/raw':>7} {'floor ms':>9} {'floor/raw':>9}"
    )
    for r in results:
        raw_gbs, kv_gbs = r["nbytes"] / r["raw_ms"] / 1e6, r["nbytes"] / r["kv_ms"] / 1e6
        print(
            f"{r['units']:>5} {r['rows']:>7} x {SEQ_LEN:<4} {r['nbytes'] / 1e6:>7.1f} {r['raw_ms']:>8.2f} {raw_gbs:>9.2f} "
            f"{r['put_ms']:>8.2f} {r['get_ms']:>8.2f} {r['kv_ms']:>8.2f} {kv_gbs:>8.2f} {kv_gbs / raw_gbs:>7.2f} "
            f"{r['floor_ms']:>9.2f} {r['raw_ms'] / r['floor_ms']:>9.2f}"
        )
    print(
        "(target KV/raw >= 0.7; a put and a get each add one round of index-actor calls to raw's ray.put/ray.get;\n"
        " floor: the same two calls to an index actor that does no work, the bound of a store controlled by Ray actors)"
    )


@ray.remote(num_cpus=0)
class RolloutWorker:
    """Writes n trajectories per prompt (the GRPO fields, unpadded); each tag counts its group's samples."""

    def generate(self, uids: list[str], n: int, global_step: int, partition_id: str) -> int:
        client = get_kv_client()
        g = torch.Generator().manual_seed(len(uids))
        keys, tags, prompts, responses = [], [], [], []
        for uid in uids:
            prompt = torch.randint(0, 32000, (int(torch.randint(128, 256, (1,), generator=g)),), generator=g)
            for s in range(n):
                response = torch.randint(0, 32000, (SEQ_LEN - 256,), generator=g)
                keys.append(trajectory_key(uid, s))
                tags.append(
                    trajectory_tag(uid, "success", len(prompt), len(response), global_step, n, acc=s % 2)
                )
                prompts.append(prompt)
                responses.append(response)
        seqs = [torch.cat([p, r]) for p, r in zip(prompts, responses)]
        fields = TensorDict(
            {
                "prompts": to_jagged(prompts),
                "responses": to_jagged(responses),
                "input_ids": to_jagged(seqs),
                "attention_mask": to_jagged([torch.ones(len(x), dtype=torch.int64) for x in seqs]),
                "position_ids": to_jagged([torch.arange(len(x)) for x in seqs]),
                "response_mask": to_jagged([torch.ones(len(r), dtype=torch.int64) for r in responses]),
                "rollout_log_probs": to_jagged([torch.randn(len(r)) for r in responses]),
                "rm_scores": torch.tensor([float(t["acc"]) for t in tags]),
            },
            batch_size=[len(keys)],
        )
        client.kv_batch_put(keys, partition_id, fields=fields, tags=tags)
        return len(keys)


@ray.remote(num_cpus=0)
class TrainWorker:
    """Reads its shard's fields and writes ``old_log_probs`` back (a stand-in for compute_log_prob)."""

    def compute_log_prob(self, meta: KVBatchMeta) -> KVBatchMeta:
        client = get_kv_client()
        td = client.kv_batch_get(meta.keys, meta.partition_id, select_fields=["input_ids", "responses"])
        old_log_probs = to_jagged([torch.zeros(int(k)) for k in td["responses"].offsets().diff()])
        return client.kv_batch_put(
            meta.keys, meta.partition_id, fields=TensorDict({"old_log_probs": old_log_probs}, [len(meta)])
        )


def size(obj) -> int:
    """Bytes of ``obj`` as pickled for Ray."""
    return len(pickle.dumps(obj))


def bench_controller_bytes(client, prompts: int, n: int) -> dict[str, int]:
    """Run one simulated GRPO step and count what crossed the controller process."""
    rollout = [RolloutWorker.remote() for _ in range(2)]
    train = [TrainWorker.remote() for _ in range(2)]
    buffer = ReplayBuffer(ReplayBufferConfig(timeout_s=120), client=client)
    before = client.stats()["io"].get(client.name, {})
    uids = [f"p{i}" for i in range(prompts)]
    markers = buffer.add_groups(uids, global_steps=0, partition_id="train")
    crossed = 2 * size(markers)  # marker tags sent to the index actors, same size back
    shards = [uids[: prompts // 2], uids[prompts // 2 :]]
    ray.get([w.generate.remote(s, n, 0, "train") for w, s in zip(rollout, shards)])
    crossed += size(shards)
    listing = size(client.kv_list("train"))  # one read of the partition's tags
    meta, metrics = buffer.sample(global_step=0, partition_id="train", batch_size=prompts)
    crossed += listing * buffer.last_sample_polls
    parts = meta.split_by_group(len(train))
    results = ray.get([w.compute_log_prob.remote(p) for w, p in zip(train, parts)])
    crossed += size(parts) + size(results)
    step_keys = meta.keys + meta.group_uids()
    client.kv_clear(step_keys, "train")
    crossed += size(step_keys)
    io = client.stats()["io"]
    rollout_names = ray.get([w.__ray_call__.remote(lambda self: get_kv_client().name) for w in rollout])
    for w in rollout + train:
        ray.kill(w)
    return {
        "rows": len(meta),
        "trajectory_bytes": sum(io[name]["bytes_written"] for name in rollout_names),
        "worker_read_bytes": sum(v["bytes_read"] for name, v in io.items() if name != client.name),
        "controller_tensor_bytes": sum(
            io.get(client.name, {}).get(k, 0) - before.get(k, 0) for k in ("bytes_read", "bytes_written")
        ),
        "controller_meta_bytes": crossed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--units",
        type=int,
        nargs="*",
        help="index-actor counts to measure (default: the store's default, one per node, then 2)",
    )
    parser.add_argument("--repeats", type=int, default=40, help="timed repetitions at the base size")
    parser.add_argument("--settle-s", type=float, default=20.0, help="idle seconds after Ray starts")
    parser.add_argument("--markdown", help="also write the table to this file (see bench/refresh_docs.py)")
    args = parser.parse_args()
    # Touch the object store's pages up front (the setting, then a first write of the whole
    # store): first-touch page faults in a fresh store (slow in VMs) would otherwise dominate the
    # first measurements of both paths.
    os.environ.setdefault("RAY_preallocate_plasma_memory", "1")
    ray.init(
        address="local",
        num_cpus=8,
        object_store_memory=OBJECT_STORE_BYTES,
        include_dashboard=False,
        log_to_driver=False,
    )
    warm_object_store(OBJECT_STORE_BYTES)
    # Ray's own processes (dashboard agent, runtime-env agent, metrics) keep both cores busy for
    # ~20 s after ray.init; measured then, raw ray.put/get takes ~2-3.5 ms at 3.4 MB instead of
    # ~1.4, and whichever configuration runs first looks better or worse than it is.
    time.sleep(args.settle_s)
    try:
        results: list[dict] = []
        floor = FloorIndex.remote()
        for units in args.units or [None, 2]:
            client = init_kv_store(num_storage_units=units, client_name="controller")
            count = len(client.indexes)
            if all(r["units"] != count for r in results):  # the default may be 2 units already
                for rows, repeats in (
                    (BASE_ROWS, args.repeats),
                    (BASE_ROWS * 32, max(10, args.repeats // 4)),
                ):
                    results.append({"units": count, **bench_throughput(client, floor, rows, repeats)})
            shutdown_kv_store()
        print_throughput(results)
        client = init_kv_store(num_storage_units=(args.units or [None])[0], client_name="controller")
        step = bench_controller_bytes(client, prompts=64, n=4)
        share = (step["controller_tensor_bytes"] + step["controller_meta_bytes"]) / step["trajectory_bytes"]
        print(
            f"\nbytes through the controller in one simulated GRPO step ({step['rows']} trajectories, ~{SEQ_LEN} tokens)"
        )
        print(f"{'trajectory bytes put by rollout workers':<48} {step['trajectory_bytes']:>12,}")
        print(f"{'bytes read by train workers':<48} {step['worker_read_bytes']:>12,}")
        print(f"{'controller: tensor bytes (store accounting)':<48} {step['controller_tensor_bytes']:>12,}")
        print(f"{'controller: keys, tags, metas (pickled)':<48} {step['controller_meta_bytes']:>12,}")
        print(f"{'crossed the controller / trajectory bytes':<48} {share:>12.3%}   (target < 1%)")
        if args.markdown:
            write_fragment(
                args.markdown,
                ["units", "batch", "raw GB/s", "KV GB/s", "KV/raw", "floor/raw"],
                [
                    [
                        str(r["units"]),
                        f"{r['rows']} × {SEQ_LEN} tokens ({r['nbytes'] / 1e6:.1f} MB)",
                        f"{r['nbytes'] / r['raw_ms'] / 1e6:.2f}",
                        f"{r['nbytes'] / r['kv_ms'] / 1e6:.2f}",
                        f"{r['raw_ms'] / r['kv_ms']:.2f}",
                        f"{r['raw_ms'] / r['floor_ms']:.2f}",
                    ]
                    for r in results
                ],
            )
    finally:
        shutdown_kv_store()
        ray.shutdown()


if __name__ == "__main__":
    main()
