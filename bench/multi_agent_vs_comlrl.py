"""MAGRPO side by side: verl_lite's CoMLRL-compatible trainer and CoMLRL 1.4.3 itself, one table.

Both sides train two agents (each its own copy of the embedded tiny model) on the length-ratio task of
CoMLRL's training setup (a "brief" and a "detailed" agent; joint reward exp(-distance) of the length
ratio detailed / brief to the band [2, 3]), with the same settings: tasks (one per update), joint samples
per task, ``max_new_tokens``, learning rate, sampling (temperature 1, top-p 1, no top-k), advantage
(group mean, normalised). Both see the same prompt tokens: verl_lite applies the chat template to the
formatter's text, and CoMLRL's formatters return that templated text (CoMLRL tokenizes the formatter's
text as it is). The user code is the same on both sides; only the import differs.

Each side runs in its own subprocess, alternating (CoMLRL, verl_lite, CoMLRL, ...), with the same number
of torch threads (``--threads``, as ``OMP_NUM_THREADS``) and priority. Per side the table gives the
median seconds of ``train()`` and of the whole process (interpreter start to exit: imports, Ray and
workers for verl_lite, model loading), and the joint reward of one evaluation (one sample per agent per
eval task) before and after training.

CoMLRL lives in its own virtual environment (``scripts/setup_peer_venv.sh comlrl`` creates ``.venv-comlrl``;
``COMLRL_VENV`` or ``--comlrl-venv`` points elsewhere); without it CoMLRL's rows say "not installed".

    .venv/bin/python bench/multi_agent_vs_comlrl.py                 # 16 tasks x 8 samples x 24 tokens
    .venv/bin/python bench/multi_agent_vs_comlrl.py --repeats 2 --markdown outputs/bench/multi_agent_vs_comlrl.md
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "verl_lite" / "assets" / "tiny_model"
DEFAULT_COMLRL_VENV = Path(os.environ.get("COMLRL_VENV", ROOT / ".venv-comlrl"))
SIDES = ("comlrl", "verl_lite")
LABELS = {"comlrl": "CoMLRL 1.4.3 MAGRPOTrainer", "verl_lite": "verl_lite MAGRPOTrainer"}
TOPICS = [
    "a city in the clouds", "a new holiday", "a dragon's bedtime", "teleportation", "dinosaurs",
    "a world without electricity", "a superhero's power", "a talking moon", "a new fruit",
    "a playground on Mars", "a library under the sea", "a robot chef", "a winter festival",
    "a map of a dream", "a friendly volcano", "a train to the stars", "a garden of glass",
    "a clock that runs backwards", "a whale who sings", "a market on the river",
]  # fmt: skip


@dataclasses.dataclass
class Settings:
    """What both sides are told; serialised to JSON for the subprocesses."""

    tasks: int
    eval_tasks: int
    num_generations: int
    max_new_tokens: int
    lr: float
    threads: int
    work_dir: str


# ---- the task: the user code both sides run unchanged ------------------------------------------------


def task_rows(s: Settings) -> tuple[list[dict], list[dict]]:
    """Training and evaluation tasks (different topics), each with the [2, 3] ratio band."""
    rows = [{"prompt": f"Describe {t}.", "target_min": 2.0, "target_max": 3.0} for t in TOPICS]
    return rows[: s.tasks], rows[len(rows) - s.eval_tasks :]


def brief(item):
    return f"Write a short response to this task:\n{item['prompt']}"


def detailed(item):
    return f"Write a detailed response to this task:\n{item['prompt']}"


def reward_func(brief_completions, detailed_completions, *, batch_items):
    item = batch_items[0]
    rewards = []
    for b, d in zip(brief_completions, detailed_completions):
        if not b:
            rewards.append(0.0)
            continue
        ratio = len(d) / len(b)
        rewards.append(math.exp(-max(item["target_min"] - ratio, ratio - item["target_max"], 0.0)))
    return rewards


# ---- one side (runs in its own process) ---------------------------------------------------------------


def run_side(side: str, s: Settings) -> dict:
    """Build the trainer with CoMLRL's call shape, evaluate, train, evaluate; the seconds and rewards."""
    if side == "comlrl":
        from comlrl.trainers import MAGRPOConfig, MAGRPOTrainer
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(MODEL)

        def templated(formatter):
            # CoMLRL feeds the formatter's text to the tokenizer as it is: give it verl_lite's tokens
            return lambda item: tokenizer.apply_chat_template(
                [{"role": "user", "content": formatter(item)}], tokenize=False, add_generation_prompt=True
            )

        formatters = [templated(brief), templated(detailed)]
        extra = {}
    else:
        from verl_lite.trainer.multi_agent import MAGRPOConfig, MAGRPOTrainer

        formatters = [brief, detailed]
        extra = {"output_dir": str(Path(s.work_dir) / "verl_lite_run")}  # CoMLRL writes no run files
    train_rows, eval_rows = task_rows(s)
    args = MAGRPOConfig(
        num_agents=2,
        num_turns=1,
        num_train_epochs=1,
        num_generations=s.num_generations,
        max_new_tokens=s.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=None,
        agent_learning_rate=s.lr,
        eval_interval=0,
        eval_num_samples=s.eval_tasks,
        logging_steps=s.num_generations,
        rollout_buffer_size=1,  # one task per update
        train_batch_size=1,
        **extra,
    )
    trainer = MAGRPOTrainer(
        agent_model=str(MODEL),
        num_agents=2,
        formatters=formatters,
        reward_func=reward_func,
        train_dataset=train_rows,
        eval_dataset=eval_rows,
        args=args,
    )
    before = trainer.evaluate()["eval/turn_1/reward_mean"]
    start = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - start
    after = trainer.evaluate()["eval/turn_1/reward_mean"]
    if hasattr(trainer, "close"):
        trainer.close()
    return {"train_s": train_s, "before": before, "after": after}


# ---- the parent: alternate the sides, print the table ---------------------------------------------------


def launch(side: str, python: Path, s: Settings, index: int) -> dict:
    """One run of ``side`` in a fresh process; its result with ``process_s``, or ``{"status": why not}``."""
    out = Path(s.work_dir) / f"{side}-{index}.json"
    log = Path(s.work_dir) / f"{side}-{index}.log"
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS=str(s.threads),
        RAY_AUTH_MODE=os.environ.get("RAY_AUTH_MODE", "disabled"),
        RAY_worker_niceness="0",  # Ray's default 15 would leave verl_lite's workers behind CoMLRL
        HF_HUB_OFFLINE="1",
        WANDB_MODE="disabled",
        TOKENIZERS_PARALLELISM="false",
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    cmd = [str(python), __file__, "--_side", side, "--_settings", json.dumps(dataclasses.asdict(s))]
    start = time.perf_counter()
    with open(log, "w") as handle:
        proc = subprocess.run(
            [*cmd, "--_out", str(out)], stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=ROOT
        )
    process_s = time.perf_counter() - start
    if proc.returncode != 0 or not out.exists():
        tail = "\n".join(log.read_text().splitlines()[-15:])
        print(f"{LABELS[side]} failed (exit {proc.returncode}); last lines of {log}:\n{tail}", flush=True)
        return {"status": f"failed (exit {proc.returncode})"}
    return {**json.loads(out.read_text()), "process_s": process_s}


def table(results: dict[str, list[dict]]) -> tuple[list[str], list[list[str]]]:
    """Median seconds (and the ratio to CoMLRL) and mean rewards per side."""
    header = ["engine", "train() s", "whole process s", "joint reward before → after", "runs"]
    medians = {
        side: {k: statistics.median(r[k] for r in runs) for k in ("train_s", "process_s")}
        for side, runs in results.items()
        if runs and "status" not in runs[0]
    }
    rows = []
    for side, runs in results.items():
        if side not in medians:
            rows.append([LABELS[side], runs[0]["status"] if runs else "not run", "", "", "0"])
            continue
        m, base = medians[side], medians.get("comlrl") if side != "comlrl" else None
        cells = [
            f"{m[k]:.1f}" + (f" ({m[k] / base[k]:.2f}×)" if base else "") for k in ("train_s", "process_s")
        ]
        before = statistics.mean(r["before"] for r in runs)
        after = statistics.mean(r["after"] for r in runs)
        rows.append([LABELS[side], *cells, f"{before:.2f} → {after:.2f}", str(len(runs))])
    return header, rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=16, help="training tasks, one update each")
    p.add_argument("--eval-tasks", type=int, default=4, help="evaluation tasks (one sample per agent each)")
    p.add_argument("--num-generations", type=int, default=8, help="joint samples per task")
    p.add_argument("--max-new-tokens", type=int, default=24, help="answer length limit per agent")
    p.add_argument("--lr", type=float, default=5e-4, help="learning rate of both agents")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (OMP_NUM_THREADS)")
    p.add_argument("--repeats", type=int, default=1, help="runs per side, alternating")
    p.add_argument("--comlrl-venv", type=Path, default=DEFAULT_COMLRL_VENV, help="CoMLRL's environment")
    p.add_argument("--markdown", help="also write the table (with its settings line) to this file")
    p.add_argument("--_side", help=argparse.SUPPRESS)
    p.add_argument("--_settings", help=argparse.SUPPRESS)
    p.add_argument("--_out", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a._side:
        result = run_side(a._side, Settings(**json.loads(a._settings)))
        Path(a._out).write_text(json.dumps(result))
        return
    if a.tasks + a.eval_tasks > len(TOPICS):
        raise SystemExit(f"--tasks {a.tasks} + --eval-tasks {a.eval_tasks} exceed the {len(TOPICS)} topics.")
    comlrl_python = a.comlrl_venv / "bin" / "python"
    has_comlrl = (
        comlrl_python.exists()
        and subprocess.run(
            [str(comlrl_python), "-c", "import comlrl.trainers"], capture_output=True
        ).returncode
        == 0
    )
    pythons = {"comlrl": comlrl_python, "verl_lite": Path(sys.executable)}
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="ma_vs_comlrl_") as work:
        s = Settings(a.tasks, a.eval_tasks, a.num_generations, a.max_new_tokens, a.lr, a.threads, work)
        results: dict[str, list[dict]] = {side: [] for side in SIDES}
        if not has_comlrl:
            results["comlrl"] = [
                {"status": f"not installed (scripts/setup_peer_venv.sh comlrl; looked in {a.comlrl_venv})"}
            ]
        for i in range(a.repeats):
            for side in SIDES:
                if side == "comlrl" and not has_comlrl:
                    continue
                r = launch(side, pythons[side], s, i)
                print(f"{LABELS[side]} run {i + 1}: {r}", flush=True)
                if "status" in r:
                    results[side] = [r]
                elif "status" not in (results[side] or [{}])[0]:
                    results[side].append(r)
    header, rows = table(results)
    command = " ".join(["python", "bench/multi_agent_vs_comlrl.py", *sys.argv[1:]])
    note = (
        f"{a.tasks} tasks × {a.num_generations} joint samples × {a.max_new_tokens} tokens, two agents on the "
        f"embedded model, lr {a.lr}, {a.threads} torch thread(s) per process, {a.repeats} run(s) per side "
        f"alternating; 1-min load average {load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the "
        f"end; `{command}`."
    )
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    print(note + "\n\n" + "\n".join(lines))
    if a.markdown:
        sys.path.insert(0, str(ROOT / "bench"))
        from refresh_docs import write_fragment

        write_fragment(a.markdown, header, rows, note)


if __name__ == "__main__":
    main()
