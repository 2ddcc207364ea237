"""Weight-sync bandwidth of the ``naive`` and ``ray`` checkpoint engines next to a plain memory copy.

A ~100M-parameter Qwen2 (random, fp32) is sent from a training-side copy to a rollout-side copy:
``naive`` within one process, ``ray`` through the object store into another process. The baseline
copies the same bytes tensor-to-tensor in one process. Run: ``python bench/weight_sync.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import ray
import torch
from refresh_docs import write_fragment
from transformers import Qwen2Config, Qwen2ForCausalLM

from verl_lite.checkpoint_engine import NaiveCheckpointEngine, RayCheckpointEngine

CONFIG = dict(
    vocab_size=32000,
    hidden_size=768,
    intermediate_size=2048,
    num_hidden_layers=10,
    num_attention_heads=24,
    num_key_value_heads=8,
    tie_word_embeddings=False,
)
RUNS = 3


def build() -> torch.nn.Module:
    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(**CONFIG)).eval()


def load_into(model: torch.nn.Module, pairs) -> None:
    state = model.state_dict(keep_vars=True)
    with torch.no_grad():
        for name, tensor in pairs:
            state[name].copy_(tensor)


@ray.remote(num_cpus=0)
class Receiver:
    def __init__(self):
        self.model = build()

    def receive(self, handle) -> float:
        start = time.perf_counter()
        load_into(self.model, RayCheckpointEngine().receive_weights(handle, 1))
        return time.perf_counter() - start


def median(fn) -> float:
    return statistics.median(fn() for _ in range(RUNS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", help="also write the table to this file (see bench/refresh_docs.py)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    source, target = build(), build()
    named = list(source.state_dict().items())
    nbytes = sum(t.numel() * t.element_size() for _, t in named)
    params = sum(p.numel() for p in source.parameters())

    def plain_copy() -> float:
        start = time.perf_counter()
        with torch.no_grad():
            for (_, src), dst in zip(named, target.state_dict().values()):
                dst.copy_(src)
        return time.perf_counter() - start

    def naive() -> float:
        engine = NaiveCheckpointEngine(bucket_megabytes=512)
        start = time.perf_counter()
        load_into(target, engine.receive_weights(engine.send_weights(iter(named), 1), 1))
        return time.perf_counter() - start

    ray.init(
        address="local", num_cpus=4, include_dashboard=False, object_store_memory=2 * nbytes + 256 * 1024**2
    )
    try:
        receiver = Receiver.remote()
        ray.get(receiver.__ray_ready__.remote())

        def via_ray() -> float:
            engine = RayCheckpointEngine(bucket_megabytes=512)
            start = time.perf_counter()
            handle = engine.send_weights(iter(named), 1)
            put = time.perf_counter() - start
            return put + ray.get(receiver.receive.remote(handle))

        rows = [("plain copy", median(plain_copy)), ("naive", median(naive)), ("ray", median(via_ray))]
    finally:
        ray.shutdown()
    base = rows[0][1]
    print(f"weight sync of {params / 1e6:.0f}M parameters ({nbytes / 1e9:.2f} GB fp32), median of {RUNS}")
    print(f"{'path':>10} | {'seconds':>8} | {'GB/s':>6} | {'vs copy':>7}")
    print("-" * 42)
    for name, seconds in rows:
        print(f"{name:>10} | {seconds:8.3f} | {nbytes / seconds / 1e9:6.2f} | {base / seconds:7.2f}")
    if args.markdown:
        write_fragment(
            args.markdown,
            ["path", "GB/s", "vs plain copy"],
            [[name, f"{nbytes / seconds / 1e9:.2f}", f"{base / seconds:.2f}"] for name, seconds in rows],
        )


if __name__ == "__main__":
    main()
