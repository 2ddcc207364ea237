"""GRPO side by side: verl_lite (hf and vllm rollout), TRL's GRPOTrainer and a bare loop, one table.

Every engine trains the same model on the same task with the same settings: prompts per step,
samples per prompt (``rollout.n`` / ``num_generations``), ``max_new_tokens``, learning rate (constant,
AdamW, no weight decay, grad-norm clip 1), temperature 1, token-mean loss (TRL's ``loss_type="dapo"``),
one PPO epoch over one mini-batch, no KL, no entropy bonus. Each engine runs in its own subprocess,
one after the other, with the same number of torch threads (``--threads``, as ``OMP_NUM_THREADS``)
and the same priority (Ray workers otherwise start at niceness 15). The table gives the median
seconds per step after the warm-up steps and the validation accuracy (the whole val split, greedy)
after the last step.

TRL lives in its own virtual environment (``scripts/setup_peer_venv.sh trl`` creates ``.venv-trl``);
without it TRL's row says "not installed". With ``--model 30m`` the engines train a random-init Qwen2
of ~30 M parameters (head_dim 64), where vLLM's CPU build outruns HF ``generate``; accuracy is then
meaningless and only step time is reported.

    .venv/bin/python bench/e2e_vs_trl.py                          # embedded tiny model, 2 + 10 steps
    .venv/bin/python bench/e2e_vs_trl.py --model 30m --threads 2   # both cores, vLLM bound to both

``--baseline REF`` adds a row for each verl_lite engine run from the git revision ``REF`` (exported with
``git archive``, put first on the engine's ``PYTHONPATH``; same interpreter, same settings), alternating with
the others, so that a change is measured against the code before it in the same sitting:

    .venv/bin/python bench/e2e_vs_trl.py --engines verl_lite-hf,verl_lite-vllm --baseline 26ffe6d
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "verl_lite" / "assets"
CONFIG_DIR = ROOT / "verl_lite" / "configs"
DEFAULT_TRL_VENV = ROOT / ".venv-trl"
ENGINES = ("bare", "verl_lite-hf", "verl_lite-vllm", "trl")
VERL_LITE_ENGINES = ("verl_lite-hf", "verl_lite-vllm")
# The engine-name suffix of a verl_lite engine run from the ``--baseline`` revision.
BASELINE = "@baseline"
LABELS = {
    "bare": "bare loop (floor)",
    "verl_lite-hf": "verl_lite (hf rollout)",
    "verl_lite-vllm": "verl_lite (vllm rollout)",
    "trl": "TRL GRPOTrainer",
}
# ~30 M parameters with the embedded tokenizer's 405-token vocabulary; head_dim 64 (vLLM CPU supports it).
MODEL_30M = dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=7, num_attention_heads=8)


@dataclasses.dataclass
class Settings:
    """What every engine is told; serialised to JSON for the engine subprocesses."""

    model_dir: str
    data_dir: str
    prompts: int
    n: int
    max_new_tokens: int
    lr: float
    warmup: int
    steps: int
    threads: int
    seed: int
    evaluate: bool
    work_dir: str


# ---- engines (each runs in its own process) ---------------------------------------------------------


def run_bare(s: Settings) -> dict:
    """The bare single-process loop of ``bench/bare_grpo_loop.py``: the floor of what a step costs."""
    import torch
    from bare_grpo_loop import run_bare_grpo

    torch.set_num_threads(s.threads)
    result = run_bare_grpo(
        s.model_dir,
        s.data_dir,
        s.prompts,
        s.n,
        s.max_new_tokens,
        s.lr,
        s.warmup + s.steps,
        evaluate_val=s.evaluate,
        seed=s.seed,
    )
    last = len(result.step_seconds)
    return {
        "step_seconds": result.step_seconds,
        "accuracy": result.accuracy.get(last),
        "accuracy_before": result.accuracy.get(0),
    }


def run_verl_lite(s: Settings, rollout: str) -> dict:
    """verl_lite through its public entry point (``main_ppo``'s config and ``run``) with Hydra overrides."""
    from hydra import compose, initialize_config_dir

    import verl_lite
    from verl_lite.main_ppo import run

    try:
        from verl_lite.trainer.load import load_ppo_config
    except ImportError:  # a --baseline revision from before the one config load
        from verl_lite.main_ppo import load_config as load_ppo_config

    # the configs of the verl_lite this process imported (this checkout's, or the baseline revision's)
    config_dir = Path(verl_lite.__file__).resolve().parent / "configs"
    print(f"verl_lite from {config_dir.parent}", flush=True)

    batch = s.prompts * s.n
    overrides = [
        f"actor_rollout_ref.model.path={s.model_dir}",
        f"data.train_files={s.data_dir}/train.parquet",
        f"data.val_files={s.data_dir}/val.parquet",
        f"data.train_batch_size={s.prompts}",
        f"data.max_response_length={s.max_new_tokens}",
        f"data.seed={s.seed}",
        f"actor_rollout_ref.rollout.name={rollout}",
        f"actor_rollout_ref.rollout.n={s.n}",
        "actor_rollout_ref.rollout.temperature=1.0",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={s.prompts}",
        # one forward/backward over the whole step's batch, as the bare loop and TRL do
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={batch}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={batch}",
        "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        f"actor_rollout_ref.actor.optim.lr={s.lr}",
        "actor_rollout_ref.actor.entropy_coeff=0.0",
        "actor_rollout_ref.actor.use_kl_loss=false",
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=false",
        f"trainer.total_training_steps={s.warmup + s.steps}",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",  # validate once, after the last step
        "trainer.logger=[jsonl]",
        f"trainer.run_dir={s.work_dir}/runs",
        f"trainer.default_local_dir={s.work_dir}/checkpoints",
        "ray_kwargs.ray_init.num_cpus=8",
    ]
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        cfg = compose("ppo_trainer", overrides=overrides)
    history = run(load_ppo_config(cfg))
    accuracy = None
    for record in history:
        for key, value in record.items():
            if key.startswith("val-core/") and key.endswith("/acc/mean@1"):
                accuracy = value
    steps = [h for h in history if "timing_s/step" in h]
    phases = sorted({k for h in steps for k in h if k.startswith("timing_s/") and k != "timing_s/step"})
    return {
        "step_seconds": [h["timing_s/step"] for h in steps],
        # seconds of each phase of the step (gen, old_log_prob, update_actor, ...), step by step
        "phase_seconds": {k: [h.get(k, 0.0) for h in steps] for k in phases},
        "accuracy": accuracy if s.evaluate else None,
    }


def run_trl(s: Settings) -> dict:
    """TRL's ``GRPOTrainer`` (run with the TRL venv's python; imports only the scorer from this repo)."""
    import time

    import pandas as pd
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from verl_lite.data.scoring import compute_score
    from verl_lite.data.task_eval import evaluate_accuracy

    torch.set_num_threads(s.threads)
    rows = pd.read_parquet(Path(s.data_dir) / "train.parquet").to_dict("records")
    dataset = Dataset.from_list(
        [
            {"prompt": [dict(m) for m in r["prompt"]], "ground_truth": r["reward_model"]["ground_truth"]}
            for r in rows
        ]
    )

    def reward(completions, ground_truth, **_) -> list[float]:
        return [compute_score(c[-1]["content"], g) for c, g in zip(completions, ground_truth)]

    class StepTimer(TrainerCallback):
        """Wall time from each step's start (before generation) to its end (after the optimizer step)."""

        def __init__(self):
            self.seconds: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self.start)

    config = GRPOConfig(
        output_dir=f"{s.work_dir}/trl",
        per_device_train_batch_size=s.prompts * s.n,
        num_generations=s.n,
        max_completion_length=s.max_new_tokens,
        learning_rate=s.lr,
        lr_scheduler_type="constant",  # verl_lite's default schedule (TRL's own default decays linearly)
        weight_decay=0.0,
        max_grad_norm=1.0,
        loss_type="dapo",  # token-mean over the batch's response tokens
        beta=0.0,
        num_iterations=1,
        epsilon=0.2,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_steps=s.warmup + s.steps,
        gradient_checkpointing=False,  # TRL turns it on by default; verl_lite's config has it off
        use_cpu=True,
        bf16=False,
        seed=s.seed,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
    )
    tokenizer = AutoTokenizer.from_pretrained(s.model_dir)
    timer = StepTimer()
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(s.model_dir),
        reward_funcs=reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[timer],
    )
    trainer.train()
    accuracy = None
    if s.evaluate:
        val_rows = pd.read_parquet(Path(s.data_dir) / "val.parquet").to_dict("records")
        accuracy = evaluate_accuracy(trainer.model, tokenizer, val_rows, s.max_new_tokens)
    return {"step_seconds": timer.seconds, "accuracy": accuracy}


def run_engine(engine: str, settings_json: str, out_path: str) -> None:
    """Subprocess entry: run one engine and write its result as JSON to ``out_path``."""
    s = Settings(**json.loads(settings_json))
    if engine == "bare":
        result = run_bare(s)
    elif engine == "trl":
        result = run_trl(s)
    else:
        result = run_verl_lite(s, engine.removesuffix(BASELINE).split("-", 1)[1])
    Path(out_path).write_text(json.dumps(result))


# ---- the driver -------------------------------------------------------------------------------------


def config_defaults() -> tuple[int, float]:
    """``data.max_response_length`` and the actor's learning rate from configs/ppo_trainer.yaml."""
    import yaml

    cfg = yaml.safe_load((CONFIG_DIR / "ppo_trainer.yaml").read_text())
    return cfg["data"]["max_response_length"], float(cfg["actor_rollout_ref"]["actor"]["optim"]["lr"])


def build_random_model(path: Path, size: dict) -> float:
    """Save a random-init Qwen2 of ``size`` with the embedded tokenizer at ``path``; returns M parameters."""
    import torch
    from transformers import AutoConfig, Qwen2Config, Qwen2ForCausalLM

    tiny = AutoConfig.from_pretrained(ASSETS / "tiny_model")
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=tiny.vocab_size,
        num_key_value_heads=size["num_attention_heads"],
        max_position_embeddings=tiny.max_position_embeddings,
        tie_word_embeddings=True,
        eos_token_id=tiny.eos_token_id,
        pad_token_id=tiny.pad_token_id,
        **size,
    )
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(path)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        shutil.copy(ASSETS / "tiny_model" / name, path / name)
    return sum(p.numel() for p in model.parameters()) / 1e6


def trl_python(venv: Path) -> Path | None:
    """The TRL venv's python when ``import trl`` works there, else None."""
    python = venv.resolve() / "bin" / "python"
    if not python.exists():
        return None
    ok = subprocess.run([str(python), "-c", "import trl"], capture_output=True).returncode == 0
    return python if ok else None


def export_revision(ref: str, dest: Path) -> str:
    """Write the files of git revision ``ref`` of this repository into ``dest``; returns its short hash."""
    short = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", ref], capture_output=True, text=True
    )
    if short.returncode:
        raise SystemExit(f"--baseline {ref!r} is not a revision of {ROOT}: {short.stderr.strip()}")
    dest.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", ref], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
    if archive.wait():
        raise SystemExit(f"git archive {ref} failed (exit {archive.returncode})")
    return short.stdout.strip()


def label(engine: str, baseline: str | None = None) -> str:
    """The table's name of ``engine`` (a baseline engine names its revision)."""
    if engine.endswith(BASELINE):
        return f"{LABELS[engine.removesuffix(BASELINE)]} @ {baseline or 'baseline'}"
    return LABELS[engine]


def engine_env(threads: int, root: Path = ROOT) -> dict[str, str]:
    """Environment of every engine subprocess: same threads and priority; vLLM's model gets those cores.

    ``root`` is the checkout whose ``verl_lite`` the engine imports (first on ``PYTHONPATH``, ahead of
    the editable install of this one).
    """
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS=str(threads),
        VLLM_CPU_OMP_THREADS_BIND=os.environ.get(
            "VLLM_CPU_OMP_THREADS_BIND", "0" if threads == 1 else f"0-{threads - 1}"
        ),
        VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        RAY_AUTH_MODE=os.environ.get("RAY_AUTH_MODE", "disabled"),
        # Ray starts its workers at niceness 15; at 0 they compete for the cores like the other engines
        RAY_worker_niceness="0",
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONPATH=os.pathsep.join([str(root), str(ROOT / "bench"), os.environ.get("PYTHONPATH", "")]),
    )
    return env


def launch(engine: str, python: Path, s: Settings, timeout_s: float, root: Path = ROOT) -> dict:
    """Run ``engine`` (importing ``root``'s verl_lite) in a fresh process; its result or ``{"status": why not}``."""
    out = Path(s.work_dir) / f"{engine}.json"
    log = Path(s.work_dir) / f"{engine}.log"
    cmd = [
        str(python),
        str(Path(__file__).resolve()),
        "--_engine",
        engine,
        "--_settings",
        json.dumps(dataclasses.asdict(s)),
    ]
    with open(log, "w") as handle:
        try:
            proc = subprocess.run(
                [*cmd, "--_out", str(out)],
                stdout=handle,
                stderr=subprocess.STDOUT,
                env=engine_env(s.threads, root),
                cwd=root,  # Ray puts the driver's working directory first on its workers' sys.path
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            return {"status": f"timed out after {timeout_s:.0f} s"}
    if proc.returncode != 0 or not out.exists():
        tail = "\n".join(log.read_text().splitlines()[-15:])
        print(f"{label(engine)} failed (exit {proc.returncode}); last lines of its log:\n{tail}", flush=True)
        return {"status": f"failed (exit {proc.returncode})"}
    return json.loads(out.read_text())


def combine(runs: list[dict], warmup: int) -> dict:
    """One engine's rounds as one result: pooled step times after each round's warm-up, mean accuracy.

    A round without steps (not installed, failed, timed out) makes the whole result that status.
    """
    failed = [r["status"] for r in runs if "status" in r]
    if failed:
        return {"status": failed[0]}
    accuracies = [r["accuracy"] for r in runs if r.get("accuracy") is not None]
    phases = sorted({k for r in runs for k in r.get("phase_seconds", {})})
    return {
        "measured": [t for r in runs for t in r["step_seconds"][warmup:]],
        "phases": {
            k: [t for r in runs for t in r.get("phase_seconds", {}).get(k, [])[warmup:]] for k in phases
        },
        "accuracy": statistics.mean(accuracies) if accuracies else None,
        "accuracy_before": runs[0].get("accuracy_before"),
    }


def median_step(result: dict) -> float | None:
    """Median seconds per measured step, or None when the engine has none."""
    measured = result.get("measured")
    return statistics.median(measured) if measured else None


def table(results: dict[str, dict], s: Settings, baseline: str | None = None) -> str:
    """The markdown comparison table (ratios against the bare loop and TRL; accuracy when evaluated)."""
    medians = {e: median_step(r) for e, r in results.items()}
    bare, trl = medians.get("bare"), medians.get("trl")
    acc_header = f" val acc after {s.warmup + s.steps} steps |" if s.evaluate else ""
    lines = [
        f"| engine | median s/step | × bare loop | × TRL |{acc_header}",
        "|---|---|---|---|" + ("---|" if s.evaluate else ""),
    ]
    for engine, result in results.items():
        m = medians[engine]
        if m is None:
            cells = [result.get("status", "no steps"), "–", "–"] + (["–"] if s.evaluate else [])
        else:
            cells = [f"{m:.3f}", f"{m / bare:.2f}" if bare else "–", f"{m / trl:.2f}" if trl else "–"]
            if s.evaluate:
                acc = result.get("accuracy")
                cells.append(f"{acc:.3f}" if acc is not None else "–")
        lines.append(f"| {label(engine, baseline)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def phase_table(results: dict[str, dict], baseline: str | None = None) -> str:
    """Median seconds of each phase of a verl_lite step (gen, old_log_prob, ...), one row per engine."""
    rows = {e: r["phases"] for e, r in results.items() if r.get("phases")}
    if not rows:
        return ""
    phases = sorted({k for p in rows.values() for k in p})
    names = [k.removeprefix("timing_s/") for k in phases]
    lines = ["| engine | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for engine, per_phase in rows.items():
        cells = [f"{statistics.median(per_phase[k]):.3f}" if per_phase.get(k) else "–" for k in phases]
        lines.append(f"| {label(engine, baseline)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdicts(
    results: dict[str, dict], s: Settings, baseline: str | None = None, baseline_bound: float = 1.05
) -> list[str]:
    """The issue's targets, each as met / not met (skipped when a side is missing); a step against
    ``baseline`` may take at most ``baseline_bound`` times the baseline's."""
    medians = {e: median_step(r) for e, r in results.items()}
    ours, bare, trl = medians.get("verl_lite-hf"), medians.get("bare"), medians.get("trl")
    out = []
    for engine in VERL_LITE_ENGINES:
        now, before = medians.get(engine), medians.get(engine + BASELINE)
        if now and before:
            out.append(
                f"{LABELS[engine]} / {baseline} = {now / before:.2f} "
                f"(target ≤ {baseline_bound:.2f}: {'met' if now <= baseline_bound * before else 'not met'})"
            )
    if ours and bare:
        out.append(
            f"verl_lite(hf) / bare = {ours / bare:.2f} (target ≤ 1.15: {'met' if ours <= 1.15 * bare else 'not met'})"
        )
    if ours and trl:
        out.append(
            f"verl_lite(hf) / TRL = {ours / trl:.2f} (target ≤ 1.00: {'met' if ours <= trl else 'not met'})"
        )
    acc_ours = results.get("verl_lite-hf", {}).get("accuracy")
    acc_trl = results.get("trl", {}).get("accuracy")
    if s.evaluate and acc_ours is not None and acc_trl is not None:
        out.append(
            f"accuracy verl_lite(hf) {acc_ours:.3f} vs TRL {acc_trl:.3f} "
            f"(target: no worse: {'met' if acc_ours >= acc_trl else 'not met'})"
        )
    return out


def parse_args() -> argparse.Namespace:
    """Command-line options (the ``--_*`` ones are the engine subprocesses' private entry)."""
    max_new_tokens, lr = config_defaults() if "--_engine" not in sys.argv else (None, None)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--model", choices=("tiny", "30m"), default="tiny", help="embedded tiny model or random ~30M"
    )
    p.add_argument("--prompts", type=int, default=8, help="prompts per step")
    p.add_argument("--n", type=int, default=4, help="samples per prompt (rollout.n / num_generations)")
    p.add_argument(
        "--max_new_tokens", type=int, default=max_new_tokens, help="default: data.max_response_length"
    )
    p.add_argument("--lr", type=float, default=lr, help="default: the actor's optim.lr in ppo_trainer.yaml")
    p.add_argument("--warmup", type=int, default=2, help="steps left out of the median")
    p.add_argument("--steps", type=int, default=10, help="measured steps after the warm-up, per round")
    p.add_argument("--rounds", type=int, default=3, help="runs of every engine, in alternating order")
    # One thread by default: on a shared 2-core machine two OpenMP threads made HF generate of the tiny
    # model 10-40x slower (each op waits for a descheduled partner thread); use 2 on a quiet machine.
    p.add_argument("--threads", type=int, default=1, help="torch threads of every engine (and vLLM's cores)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--engines", default=",".join(ENGINES), help=f"comma-separated subset of {','.join(ENGINES)}"
    )
    p.add_argument(
        "--baseline", help="git revision whose verl_lite runs beside this one (a row per verl_lite engine)"
    )
    p.add_argument("--trl_venv", type=Path, default=Path(os.environ.get("TRL_VENV", DEFAULT_TRL_VENV)))
    p.add_argument("--timeout_s", type=float, default=900.0, help="limit for each engine's subprocess")
    p.add_argument("--markdown", help="also write the table (with its settings line) to this file")
    p.add_argument("--_engine", help=argparse.SUPPRESS)
    p.add_argument("--_settings", help=argparse.SUPPRESS)
    p.add_argument("--_out", help=argparse.SUPPRESS)
    return p.parse_args()


def engine_python(engine: str, trl_venv: Path) -> Path | None:
    """The interpreter that runs ``engine``, or None when its framework is not installed."""
    engine = engine.removesuffix(BASELINE)
    if engine == "trl":
        python = trl_python(trl_venv)
        if python is None:
            print(f"TRL is not installed in {trl_venv}; create it with: bash scripts/setup_peer_venv.sh trl")
        return python
    if engine == "verl_lite-vllm":
        if subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True).returncode:
            print("vLLM is not installed: scripts/install_vllm_cpu.sh .venv/bin/python installs it")
            return None
    return Path(sys.executable)


def settings_line(
    s: Settings, params: float | None, rounds: int, load: tuple[float, float], results: dict
) -> str:
    """One sentence with what was measured and under which machine load."""
    model = f"random Qwen2, {params:.1f}M parameters" if params else "embedded tiny model"
    line = (
        f"{model}; {s.prompts} prompts × n={s.n}, {s.max_new_tokens} new tokens, lr {s.lr:g}, "
        f"{s.threads} thread(s); {rounds} round(s) of {s.warmup} warm-up + {s.steps} measured steps per engine, "
        f"engines alternating order each round; median over the {rounds * s.steps} measured steps, "
        "accuracy the mean over rounds; "
        f"1-min load average {load[0]:.1f} at the start, {load[1]:.1f} at the end"
    )
    if s.evaluate and results.get("bare", {}).get("accuracy_before") is not None:
        line += f"; val accuracy before training {results['bare']['accuracy_before']:.3f}"
    return line + "."


def run_rounds(
    engines: list[str], s: Settings, rounds: int, trl_venv: Path, timeout_s: float, baseline_root: Path | None
) -> dict:
    """Run every engine ``rounds`` times, reversing the order each round so that load drifts even out.

    Engines named ``...@baseline`` import the verl_lite exported to ``baseline_root``.
    """
    pythons = {engine: engine_python(engine, trl_venv) for engine in engines}
    runs: dict[str, list[dict]] = {engine: [] for engine in engines}
    for r in range(rounds):
        for engine in engines if r % 2 == 0 else engines[::-1]:
            python = pythons[engine]
            root = baseline_root if engine.endswith(BASELINE) else ROOT
            print(f"== round {r + 1}/{rounds}: {label(engine)}", flush=True)
            runs[engine].append(
                launch(engine, python, s, timeout_s, root) if python else {"status": "not installed"}
            )
    return {engine: combine(runs[engine], s.warmup) for engine in engines}


def main() -> None:
    """Run the engines one after the other and print the side-by-side table."""
    args = parse_args()
    if args._engine:
        run_engine(args._engine, args._settings, args._out)
        return
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        raise SystemExit(f"--engines has unknown names {unknown}; valid: {', '.join(ENGINES)}")
    with tempfile.TemporaryDirectory(prefix="e2e_vs_trl_") as work:
        baseline, baseline_root = None, None
        if args.baseline:
            baseline_root = Path(work) / "baseline"
            baseline = export_revision(args.baseline, baseline_root)
            engines += [e + BASELINE for e in engines if e in VERL_LITE_ENGINES]
        model_dir, params = ASSETS / "tiny_model", None
        if args.model == "30m":
            model_dir = Path(work) / "model_30m"
            params = build_random_model(model_dir, MODEL_30M)
        s = Settings(
            model_dir=str(model_dir),
            data_dir=str(ASSETS / "synthetic"),
            prompts=args.prompts,
            n=args.n,
            max_new_tokens=args.max_new_tokens,
            lr=args.lr,
            warmup=args.warmup,
            steps=args.steps,
            threads=args.threads,
            seed=args.seed,
            evaluate=args.model == "tiny",
            work_dir=work,
        )
        load_start = os.getloadavg()[0]
        results = run_rounds(engines, s, args.rounds, args.trl_venv, args.timeout_s, baseline_root)
    load = (load_start, os.getloadavg()[0])
    body = f"{settings_line(s, params, args.rounds, load, results)}\n\n{table(results, s, baseline)}\n"
    phases = phase_table(results, baseline)
    if phases:
        body += f"\nMedian seconds per phase of a verl_lite step:\n\n{phases}\n"
    print(f"\n{body}")
    for line in verdicts(results, s, baseline, 1.10 if args.model == "tiny" else 1.05):
        print(line)
    if args.markdown:
        Path(args.markdown).write_text(body)


if __name__ == "__main__":
    main()
