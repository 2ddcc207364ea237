"""Checkpoint and resume end to end: a crashed run picks up exactly where its last checkpoint left off."""

import glob
import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from tests.trainer.helpers import FAST, crashing_mode, joining, train
from tests.trainer.test_logging_on_cpu import read_wandb_history
from verl_lite.trainer.checkpoint import COMPLETE_MARKER, checkpoint_damage, complete_checkpoints
from verl_lite.trainer.load import compose_config, load_ppo_config
from verl_lite.trainer.validation import EMBEDDED_DATA

# 8 prompts, 4 per step: 2 steps per epoch, 3 epochs; checkpoints after steps 2, 4 and 6 (epoch ends).
COMMON = [
    "data.train_batch_size=4",
    "trainer.total_epochs=3",
    "trainer.total_training_steps=null",
    "trainer.save_freq=2",
    "trainer.max_ckpt_to_keep=2",
]
# A trainer mode that dies right after step 3 was logged: the checkpoint of step 2 is the newest.
CRASHING_MODE = crashing_mode(
    "crash_after_3", "verl_lite.trainer.ppo.trainer_sync", "SyncTrainer", after_step=3
)


def _comparable(entry: dict) -> dict:
    """Everything but wall-clock measurements."""
    clocks = ("timing_s/", "timing_per_token_ms/", "perf/throughput", "replay_buffer/wait_s")
    return {k: v for k, v in entry.items() if not k.startswith(clocks)}


# Metrics of the rollout's own float32 log-probs. The samples are seeded per request, so they repeat
# exactly, but which requests the hf server batches together depends on when they arrive; another
# padding width sums the same logits in another order: differences of a few float32 ulps (~1e-7 of
# probabilities), far below any real mismatch of weights (>1e-3).
ROUNDING = {"training/rollout_probs_diff_mean": 1e-6}


def _differences(history: list[dict], reference: list[dict], steps: set[int]) -> dict[int, dict]:
    """Per step, the metrics (other than timings) whose values differ: ``{step: {key: (got, expected)}}``."""
    got = {h["step"]: _comparable(h) for h in history if h["step"] in steps}
    want = {h["step"]: _comparable(h) for h in reference if h["step"] in steps}
    assert sorted(got) == sorted(want) == sorted(steps)
    out = {}
    for step in steps:
        keys = got[step].keys() | want[step].keys()
        diff = {
            k: (got[step].get(k), want[step].get(k))
            for k in keys
            if got[step].get(k) != want[step].get(k)
            and not (k in ROUNDING and abs(got[step][k] - want[step][k]) <= ROUNDING[k])
        }
        if diff:
            out[step] = diff
    return out


@pytest.fixture
def eight_prompts(tmp_path):
    path = tmp_path / "train8.parquet"
    pd.read_parquet(os.path.join(EMBEDDED_DATA, "train.parquet")).head(8).to_parquet(path)
    return f"data.train_files={path}"


def test_killed_run_resumes_with_the_same_metrics(tmp_path, eight_prompts, cluster):
    full = train(tmp_path / "full", *joining(cluster), eight_prompts, *COMMON)
    assert [h["step"] for h in full] == [1, 2, 3, 4, 5, 6]
    assert [h["training/epoch"] for h in full] == [0, 0, 1, 1, 2, 2]
    full_ckpts = tmp_path / "full" / "grpo_tiny" / "checkpoints"
    assert [step for step, _ in complete_checkpoints(full_ckpts)] == [4, 6]  # max_ckpt_to_keep=2

    crash = tmp_path / "crash_mode.py"
    crash.write_text(CRASHING_MODE)
    run_dir = tmp_path / "crashed"
    with pytest.raises(Exception, match="simulated crash after step 3"):
        train(
            run_dir,
            *joining(cluster),
            eight_prompts,
            *COMMON,
            f"trainer.extensions=[{crash}]",
            "trainer.mode=crash_after_3",
        )
    ckpts = run_dir / "grpo_tiny" / "checkpoints"
    assert [step for step, _ in complete_checkpoints(ckpts)] == [2]
    # Leftovers of a crash during a later save: neither may be picked by resume_mode=auto.
    (ckpts / "global_step_3.partial" / "actor").mkdir(parents=True)
    (ckpts / "global_step_4" / "actor").mkdir(parents=True)

    resumed = train(run_dir, *joining(cluster), eight_prompts, *COMMON)  # resume_mode=auto is the default
    assert [h["step"] for h in resumed] == [
        1,
        2,
        3,
        4,
        5,
        6,
    ]  # history of steps 1-2 comes from the checkpoint
    # Step 3 redone from the step-2 checkpoint (an epoch boundary) and everything after it: identical.
    assert _differences(resumed, full, {3, 4, 5, 6}) == {}
    assert (ckpts / "global_step_4" / COMPLETE_MARKER).exists()  # the half-written folder was replaced
    logged = [json.loads(line)["step"] for line in (run_dir / "grpo_tiny" / "metrics.jsonl").open()]
    assert logged == [1, 2, 3, 4, 5, 6]  # the crashed run's step 3 was dropped, not duplicated


def test_a_damaged_newest_checkpoint_is_passed_over_for_an_older_one_or_named_before_ray_starts(
    tmp_path, capsys, cluster
):
    # W&B (offline) logs both runs: the resumed one continues the first one's run id
    logged = ["trainer.total_training_steps=2", "trainer.save_freq=1", "trainer.logger=[jsonl,wandb]"]
    first = train(tmp_path, *joining(cluster), *logged)
    ckpts = tmp_path / "grpo_tiny" / "checkpoints"
    step1, step2 = ckpts / "global_step_1", ckpts / "global_step_2"
    shard = step2 / "actor" / "__0_0.distcp"
    os.truncate(shard, shard.stat().st_size // 2)  # a copy cut short
    overrides = [
        *FAST,
        f"trainer.run_dir={tmp_path}",
        "trainer.total_training_steps=2",
        "trainer.save_freq=1",
    ]

    capsys.readouterr()
    load_ppo_config(compose_config("ppo_trainer", overrides))
    notice = [
        line for line in capsys.readouterr().err.splitlines() if line.startswith("verl_lite: checkpoint")
    ]
    assert len(notice) == 1 and notice[0].startswith(
        f"verl_lite: checkpoint {str(step2)!r} is damaged: {str(shard)!r} is truncated ("
    ), notice
    assert notice[0].endswith(f"; resuming from the older {str(step1)!r} instead.")
    resumed = train(tmp_path, *joining(cluster), *logged)
    assert [h["step"] for h in resumed] == [1, 2]
    assert resumed[0] == first[0]  # step 1 (timings too) came from the step-1 checkpoint: not a fresh start
    assert checkpoint_damage(str(step2)) is None  # step 2 was trained again and saved whole
    # W&B offline writes each process's part to its own folder named after the run id: one id, two parts
    folders = sorted(glob.glob(str(tmp_path / "grpo_tiny" / "wandb" / "offline-run-*")))
    run_id = (tmp_path / "grpo_tiny" / "wandb_run_id").read_text()
    assert len(folders) == 2 and all(f.endswith(f"-{run_id}") for f in folders), folders
    (second,) = glob.glob(os.path.join(folders[1], "run-*.wandb"))
    assert [r["_step"] for r in read_wandb_history(second) if "critic/score/mean" in r] == [2]

    # Nothing readable left: one sentence per checkpoint, before Ray starts, and main_ppo exits 2.
    os.truncate(shard, 0)
    extra = step1 / "actor" / "extra_rank0.pt"
    os.truncate(extra, extra.stat().st_size - 100)  # torch's zip archive without its directory
    with pytest.raises(ValueError) as info:
        load_ppo_config(compose_config("ppo_trainer", overrides))
    assert (
        f"trainer.resume_mode=auto found no readable checkpoint under {str(ckpts)!r}: checkpoint "
        f"{str(step2)!r} is damaged: {str(shard)!r} is truncated (0 bytes, its .metadata records "
    ) in str(info.value)
    assert f"checkpoint {str(step1)!r} is damaged: {str(extra)!r} is unreadable (BadZipFile: " in str(
        info.value
    )
    proc = subprocess.run(
        [sys.executable, "-m", "verl_lite.main_ppo", *overrides, f"hydra.run.dir={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert "trainer.resume_mode=auto found no readable checkpoint" in proc.stderr
    assert "Traceback" not in proc.stderr and "PytorchStreamReader" not in proc.stderr

    with pytest.raises(
        ValueError, match=r"trainer.resume_from_path=.*global_step_2' is damaged: .* truncated"
    ):
        load_ppo_config(
            compose_config(
                "ppo_trainer",
                [*overrides, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={step2}"],
            )
        )


def test_a_lora_run_with_packed_rows_resumes_with_the_same_metrics(tmp_path, cluster):
    # The checkpoint holds only the adapters and their optimizer state; the base comes from model.path.
    lora = [
        "actor_rollout_ref.model.lora_rank=4",
        "actor_rollout_ref.model.use_remove_padding=true",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "trainer.total_training_steps=3",
        "trainer.save_freq=1",
    ]
    full = train(tmp_path / "full", *joining(cluster), *lora)
    step1 = tmp_path / "full" / "grpo_tiny" / "checkpoints" / "global_step_1"
    resumed = train(
        tmp_path / "resumed",
        *joining(cluster),
        *lora,
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={step1}",
    )
    assert _differences(resumed, full, {2, 3}) == {}
