"""Sync vs one_step_off vs fully_async training on the embedded task: samples/s and val accuracy, side by side.

Each mode runs ``python -m verl_lite.main_ppo`` in its own process (a fresh local Ray) with the same
model, prompts, n, steps and seed, on a standalone rollout pool of one hf server, so the only
difference is the schedule: ``sync`` generates, then trains; ``one_step_off`` generates the next batch
while the current one trains, plain or with token-level TIS against the rollout's log-probs;
``fully_async`` streams groups into the replay buffer, at most one weight version stale, with a weight
sync (and partial rollout) after every update. Every process
gets ``--threads`` torch threads, so on a 2-core machine with one thread each the rollout server and
the trainer can each have a core. Samples per second = trained trajectories / the summed
``timing_s/step`` (start-up and the final validation excluded); accuracy = the greedy validation
after the last step; with several ``--seeds`` the samples and loop times add up and the accuracies
are averaged (each seed's is listed).

    .venv/bin/python bench/async_vs_sync.py --steps 30 --prompts 8 --n 4 --seeds 2 3 4 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = {
    "sync": ["trainer.mode=sync"],
    "one_step_off": ["trainer.mode=one_step_off"],
    # the correction needs the old-log-prob forward, which the single-pass update otherwise skips
    "one_step_off+tis": ["trainer.mode=one_step_off", "algorithm.rollout_correction.rollout_is=token"],
    "fully_async": [
        "trainer.mode=fully_async",
        "trainer.parameter_sync_step=1",
        "trainer.replay_buffer.max_off_policy_threshold=1",
        "trainer.replay_buffer.off_policy_strategy=wait",
    ],
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--prompts", type=int, default=8, help="prompts per step")
    p.add_argument("--n", type=int, default=4, help="samples per prompt")
    p.add_argument("--max_response_length", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--threads", type=int, default=1, help="torch threads of every process")
    p.add_argument(
        "--seeds", type=int, nargs="+", default=[0], help="data seeds; every mode runs once per seed"
    )
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    p.add_argument("--timeout_s", type=float, default=1200.0, help="per mode")
    p.add_argument("--markdown", help="also write the tables to this file (a docs/benchmarks.md fragment)")
    return p.parse_args()


def overrides(args: argparse.Namespace, seed: int, run_dir: Path) -> list[str]:
    """The main_ppo overrides every mode shares."""
    batch = args.prompts * args.n
    return [
        f"data.train_batch_size={args.prompts}",
        f"data.max_response_length={args.max_response_length}",
        f"data.seed={seed}",
        f"actor_rollout_ref.rollout.n={args.n}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={args.prompts}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={batch}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={batch}",
        f"actor_rollout_ref.actor.optim.lr={args.lr}",
        "actor_rollout_ref.rollout.mode=standalone",
        "actor_rollout_ref.rollout.nnodes=1",
        "actor_rollout_ref.rollout.n_gpus_per_node=1",
        f"trainer.total_training_steps={args.steps}",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",  # validate once, after the last step
        "trainer.save_freq=-1",
        "trainer.logger=[jsonl]",
        f"trainer.run_dir={run_dir}",
        "ray_kwargs.ray_init.num_cpus=8",
    ]


def run_mode(mode: str, seed: int, args: argparse.Namespace, work: Path) -> dict:
    """One main_ppo run of ``mode``; its throughput, accuracy and mean staleness, or ``{"status": why not}``."""
    run_dir = work / f"{mode}-seed{seed}"
    env = dict(
        os.environ,
        OMP_NUM_THREADS=str(args.threads),
        RAY_AUTH_MODE=os.environ.get("RAY_AUTH_MODE", "disabled"),
        RAY_worker_niceness="0",
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    cmd = [sys.executable, "-m", "verl_lite.main_ppo", *overrides(args, seed, run_dir), *MODES[mode]]
    log = work / f"{mode}-seed{seed}.log"
    start = time.perf_counter()
    with open(log, "w") as handle:
        try:
            proc = subprocess.run(
                cmd, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=ROOT, timeout=args.timeout_s
            )
        except subprocess.TimeoutExpired:
            return {"status": f"timed out after {args.timeout_s:.0f} s"}
    wall = time.perf_counter() - start
    metrics = sorted(run_dir.glob("*/metrics.jsonl"))
    if proc.returncode != 0 or not metrics:
        tail = "\n".join(log.read_text().splitlines()[-15:])
        return {"status": f"failed (exit {proc.returncode}):\n{tail}"}
    steps = [json.loads(line) for line in metrics[0].read_text().splitlines()]
    steps = [h for h in steps if "timing_s/step" in h]
    accuracy = [v for k, v in steps[-1].items() if k.startswith("val-core/") and k.endswith("/acc/mean@1")]
    loop_s = sum(h["timing_s/step"] for h in steps)
    return {
        "status": "ok",
        "samples": len(steps) * args.prompts * args.n,
        "loop_s": loop_s,
        "wall_s": wall,
        "samples_per_s": len(steps) * args.prompts * args.n / loop_s,
        "accuracy": accuracy[0] if accuracy else float("nan"),
        "staleness": sum(h.get("async/staleness/mean", 0.0) for h in steps) / len(steps),
        "idle_s": sum(h.get("async/trainer_idle_s", 0.0) for h in steps),
        "rollout_idle_s": sum(h.get("async/rollout_idle_s", 0.0) for h in steps),
        "partial": sum(h.get("async/partial_fraction", 0.0) for h in steps) / len(steps),
        "phases": {
            k.removeprefix("timing_s/"): sum(h.get(k, 0.0) for h in steps) / len(steps)
            for k in sorted({k for h in steps for k in h if k.startswith("timing_s/")})
        },
    }


def combine(runs: list[dict]) -> dict:
    """One mode's runs over the seeds: summed samples and loop time, mean accuracy, staleness and phases."""
    if any(r["status"] != "ok" for r in runs):
        return next(r for r in runs if r["status"] != "ok")

    def mean(key: str) -> float:
        return sum(r[key] for r in runs) / len(runs)

    samples, loop_s = sum(r["samples"] for r in runs), sum(r["loop_s"] for r in runs)
    return {
        "status": "ok",
        "samples": samples,
        "loop_s": loop_s,
        "samples_per_s": samples / loop_s,
        "accuracy": mean("accuracy"),
        "accuracies": [r["accuracy"] for r in runs],
        "staleness": mean("staleness"),
        "idle_s": mean("idle_s"),
        "rollout_idle_s": mean("rollout_idle_s"),
        "partial": mean("partial"),
        "phases": {k: sum(r["phases"].get(k, 0.0) for r in runs) / len(runs) for k in runs[0]["phases"]},
    }


def table(results: dict[str, dict]) -> str:
    """The markdown table of the runs, with each mode's speed and accuracy relative to sync's."""
    sync = results.get("sync", {})
    base = sync.get("samples_per_s")
    lines = [
        "| mode | samples | loop s | samples/s | vs sync | val acc (mean) | vs sync | val acc per seed "
        "| mean staleness | trainer idle s | rollout idle s | partial |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, r in results.items():
        if r["status"] != "ok":
            lines.append(f"| {mode} | {r['status'].splitlines()[0]} |" + " |" * 10)
            continue
        ratio = f"{r['samples_per_s'] / base:.2f}x" if base else "-"
        gap = f"{100 * (r['accuracy'] - sync['accuracy']):+.1f} pt" if base else "-"
        seeds = " / ".join(f"{a:.3f}" for a in r["accuracies"])
        lines.append(
            f"| {mode} | {r['samples']} | {r['loop_s']:.1f} | {r['samples_per_s']:.2f} | {ratio} | "
            f"{r['accuracy']:.3f} | {gap} | {seeds} | {r['staleness']:.2f} | {r['idle_s']:.1f} | "
            f"{r['rollout_idle_s']:.1f} | {r['partial']:.2f} |"
        )
    phases = sorted({k for r in results.values() if r["status"] == "ok" for k in r["phases"]})
    lines += ["", "Mean seconds per step (`timing_s/*`):", ""]
    lines += ["| mode | " + " | ".join(phases) + " |", "|---|" + "---|" * len(phases)]
    for mode, r in results.items():
        if r["status"] == "ok":
            lines.append(f"| {mode} | " + " | ".join(f"{r['phases'].get(k, 0.0):.3f}" for k in phases) + " |")
    return "\n".join(lines)


def main() -> None:
    args = parse_args()
    runs: dict[str, list[dict]] = {mode: [] for mode in args.modes}
    start_load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="async_vs_sync_") as tmp:
        # seed by seed, every mode in turn: a change of machine load spreads over all modes alike
        for seed in args.seeds:
            for mode in args.modes:
                print(f"running {mode} (seed {seed}) ...", flush=True)
                runs[mode].append(run_mode(mode, seed, args, Path(tmp)))
                if runs[mode][-1]["status"] != "ok":
                    print(runs[mode][-1]["status"], flush=True)
    results = {mode: combine(r) for mode, r in runs.items()}
    load = os.getloadavg()[0]
    note = (
        f"{args.steps} steps x {args.prompts} prompts x n={args.n}, responses <= {args.max_response_length} "
        f"tokens, data seeds {args.seeds}, {args.threads} thread(s) a process, one standalone hf rollout "
        f"server; 1-min load average {start_load:.1f} at the start, {load:.1f} at the end."
    )
    print(f"\n{note}\n\n{table(results)}")
    if args.markdown:
        Path(args.markdown).write_text(f"{note}\n\n{table(results)}\n")


if __name__ == "__main__":
    main()
