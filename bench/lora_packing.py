"""LoRA and sequence packing side by side on the 30M model: step time, peak memory and weight-sync bytes.

One training step of the policy worker is timed: the old-log-prob pass, the PPO update (one
optimizer step over the batch) and the weight sync to the colocated HF rollout — everything of a
GRPO step but generation and scoring, which neither LoRA nor packing changes. Four set-ups run the
same fixed batch: full fine-tuning or LoRA (rank ``--lora_rank`` on every linear layer), each on
padded or packed micro-batches (``model.use_remove_padding``). Response lengths follow a long tail
like RL's (log-normal, median ``--median_response`` tokens, capped at ``--max_response``), so a
padded micro-batch is mostly padding. Each set-up gets a fresh worker process; rounds alternate the
order so load drifts even out. Peak memory is the worker's peak resident set during the steps
(Linux ``VmHWM`` reset before them) less the set after loading, or the same from
``torch.cuda.max_memory_allocated`` on a GPU: what training adds (activations, gradients, optimizer
state) on top of the loaded actor and rollout models.

    .venv/bin/python bench/lora_packing.py --markdown outputs/bench/lora_packing.md
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_worker_niceness", "0")  # Ray starts workers at 15; compete like the driver
# Large blocks straight from mmap and back on free: the resident set then follows live memory instead of
# what glibc's heap keeps cached, so its peak measures the step (the workers inherit this).
os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")

import ray
import torch
from e2e_vs_trl import MODEL_30M, build_random_model
from refresh_docs import write_fragment
from tensordict import TensorDict
from verl_lite.workers.actor_rollout_ref import ActorRolloutRefWorker

from verl_lite.single_controller import Dispatch, register
from verl_lite.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

SETUPS = {
    "full, padded": {},
    "full, packed": {"use_remove_padding": True},
    "LoRA, padded": {"lora": True},
    "LoRA, packed": {"lora": True, "use_remove_padding": True},
}


class MeasuredWorker(ActorRolloutRefWorker):
    """The policy worker plus a peak-memory probe of its own process."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def reset_peak_memory(self) -> None:
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        else:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM, the peak resident set

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def trained_state_bytes(self) -> int:
        """Gradients and AdamW's two moments of the trained parameters: 3 x their float32 bytes."""
        return 3 * sum(p.numel() * p.element_size() for p in self.actor.model.parameters() if p.requires_grad)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def memory_bytes(self) -> dict[str, int]:
        """``now`` and ``peak`` (since the last reset): allocated GPU memory, or resident CPU memory."""
        if torch.cuda.is_available():
            return {"now": torch.cuda.memory_allocated(), "peak": torch.cuda.max_memory_allocated()}
        with open("/proc/self/status") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
        return {
            key: int(status[field].split()[0]) * 1024 for key, field in (("now", "VmRSS"), ("peak", "VmHWM"))
        }


def batch_lengths(rows: int, median: int, cap: int, seed: int) -> list[tuple[int, int]]:
    """(prompt, response) lengths: prompts 32-96 tokens, responses log-normal (sigma 0.8) capped at ``cap``."""
    gen = torch.Generator().manual_seed(seed)
    prompts = torch.randint(32, 97, (rows,), generator=gen).tolist()
    noise = torch.randn(rows, generator=gen).tolist()
    responses = [max(4, min(cap, round(median * math.exp(0.8 * z)))) for z in noise]
    return list(zip(prompts, responses))


def put_batch(kv, lengths: list[tuple[int, int]], vocab: int, seed: int):
    gen = torch.Generator().manual_seed(seed)

    def jagged(rows, dtype=torch.long):
        return torch.nested.nested_tensor([r.to(dtype) for r in rows], layout=torch.jagged)

    prompts = [torch.randint(3, vocab, (p,), generator=gen) for p, _ in lengths]
    responses = [torch.randint(3, vocab, (r,), generator=gen) for _, r in lengths]
    advantages = [torch.full((r,), 1.0 if i % 2 else -1.0) for i, (_, r) in enumerate(lengths)]
    fields = {
        "prompts": jagged(prompts),
        "responses": jagged(responses),
        "advantages": jagged(advantages, torch.float32),
    }
    keys = [f"b{i}_0_0" for i in range(len(lengths))]
    meta = kv.kv_batch_put(keys, "train", fields=TensorDict(fields, [len(keys)]), tags=[{}] * len(keys))
    meta.extra_info = {"global_steps": 1, "samples_per_prompt": 1}
    return meta


def worker_config(model_dir: str, setup: dict, rows: int, micro: int, lora_rank: int) -> dict:
    model = {"path": model_dir, "use_remove_padding": setup.get("use_remove_padding", False)}
    if setup.get("lora"):
        model.update(lora_rank=lora_rank, lora_alpha=2 * lora_rank)
    return {
        "model": model,
        "actor": {
            "ppo_mini_batch_size": rows,
            "ppo_micro_batch_size_per_gpu": micro,
            "shuffle": False,
            "optim": {"lr": 1e-5},
        },
        "rollout": {"name": "hf", "log_prob_micro_batch_size_per_gpu": micro, "free_cache_engine": False},
    }


def measure(model_dir, setup, kv, meta, args) -> dict:
    """Steps of one set-up in a fresh worker: seconds per step, peak memory, bytes per sync."""
    config = worker_config(model_dir, setup, len(meta), args.micro_batch, args.lora_rank)
    group = RayWorkerGroup(
        RayResourcePool([1], name_prefix="bench"),
        RayClassWithInitArgs(MeasuredWorker, config=config, role="actor_rollout"),
    )
    try:
        group.init_model()
        group.reset_peak_memory()
        loaded = group.memory_bytes()[0]["now"]
        seconds = []
        for step in range(args.warmup + args.steps):
            start = time.perf_counter()
            group.update_actor(group.compute_log_prob(meta))
            sync = group.update_weights(step)[0]["update_weights/bytes"]
            seconds.append(time.perf_counter() - start)
        # What training adds on top of the loaded models: activations, gradients, optimizer state.
        added = group.memory_bytes()[0]["peak"] - loaded
        state = group.trained_state_bytes()[0]
        return {"seconds": seconds[args.warmup :], "peak": added, "sync": sync, "state": state}
    finally:
        group.kill()
        group.resource_pool.release()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=16, help="trajectories in the step's batch")
    p.add_argument("--micro_batch", type=int, default=8, help="rows per forward (padded and packed alike)")
    p.add_argument("--median_response", type=int, default=96, help="median response length in tokens")
    p.add_argument("--max_response", type=int, default=384, help="longest response in tokens")
    p.add_argument("--lora_rank", type=int, default=16)
    p.add_argument("--warmup", type=int, default=1, help="steps left out of the median")
    p.add_argument("--steps", type=int, default=2, help="measured steps per set-up and round")
    p.add_argument("--rounds", type=int, default=2, help="runs of every set-up, in alternating order")
    # One thread by default: on a loaded 2-core machine two threads make step times swing several-fold.
    p.add_argument("--threads", type=int, default=1, help="torch threads of the worker")
    p.add_argument("--markdown", help="also write the table to this file (see bench/refresh_docs.py)")
    args = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    lengths = batch_lengths(args.rows, args.median_response, args.max_response, seed=0)
    tokens = sum(p + r for p, r in lengths)
    padded = sum(
        len(chunk) * (max(p for p, _ in chunk) + max(r for _, r in chunk))
        for chunk in (lengths[i : i + args.micro_batch] for i in range(0, len(lengths), args.micro_batch))
    )
    with tempfile.TemporaryDirectory(prefix="lora_packing_") as work:
        model_dir = Path(work) / "model_30m"
        params = build_random_model(model_dir, MODEL_30M)
        ray.init(address="local", num_cpus=8, object_store_memory=300 * 1024**2, include_dashboard=False)
        try:
            from verl_lite.kv import init_kv_store, shutdown_kv_store

            kv = init_kv_store(num_storage_units=1)
            meta = put_batch(kv, lengths, vocab=405, seed=1)
            runs = {name: [] for name in SETUPS}
            load_start = os.getloadavg()[0]
            for r in range(args.rounds):
                for name in list(SETUPS) if r % 2 == 0 else list(SETUPS)[::-1]:
                    print(f"== round {r + 1}/{args.rounds}: {name}", flush=True)
                    runs[name].append(measure(str(model_dir), SETUPS[name], kv, meta, args))
            shutdown_kv_store()
        finally:
            ray.shutdown()
    load = (load_start, os.getloadavg()[0])
    results = {
        name: {
            "s": statistics.median(t for run in rs for t in run["seconds"]),
            "peak": max(run["peak"] for run in rs),
            "sync": rs[0]["sync"],
            "state": rs[0]["state"],
        }
        for name, rs in runs.items()
    }
    base = results["full, padded"]
    header = [
        "set-up",
        "median s/step",
        "× full padded",
        "training memory MiB",
        "of which gradients + AdamW MiB",
        "MB per weight sync",
        "sync × full",
    ]
    rows = [
        [
            name,
            f"{r['s']:.2f}",
            f"{r['s'] / base['s']:.2f}",
            f"{r['peak'] / 2**20:.0f}",
            f"{r['state'] / 2**20:.0f}",
            f"{r['sync'] / 1e6:.2f}",
            f"{r['sync'] / base['sync']:.3f}",
        ]
        for name, r in results.items()
    ]
    memory = "GPU memory allocated" if torch.cuda.is_available() else "the worker's resident set"
    note = (
        f"Random Qwen2, {params:.1f}M parameters; {args.rows} trajectories, prompts 32-96 tokens, responses "
        f"log-normal with median {args.median_response} capped at {args.max_response} "
        f"({min(r for _, r in lengths)}-{max(r for _, r in lengths)} here): {tokens} tokens, "
        f"{padded} in padded micro-batches of {args.micro_batch} ({1 - tokens / padded:.0%} padding); "
        f"LoRA rank {args.lora_rank} on every linear layer; a step = old-log-prob pass + update + weight sync; "
        f"{args.threads} thread(s); {args.rounds} round(s) of {args.warmup} warm-up + {args.steps} measured "
        f"steps per set-up; training memory = peak of {memory} during the steps (warm-up included) less its size after loading the models; 1-min load average {load[0]:.1f} at the start, "
        f"{load[1]:.1f} at the end."
    )
    print(f"\n{note}\n")
    print(" | ".join(header))
    for row in rows:
        print(" | ".join(row))
    ratio = results["LoRA, packed"]["sync"] / base["sync"]
    print(f"\nLoRA sync bytes / full = {ratio:.3f} (target ≤ 0.05: {'met' if ratio <= 0.05 else 'not met'})")
    if args.markdown:
        write_fragment(args.markdown, header, rows, note=note)


if __name__ == "__main__":
    main()
