"""Checkpoint and resume end to end: a crashed run picks up exactly where its last checkpoint left off."""

import json
import os

import pandas as pd
import pytest

from tests.trainer.helpers import train
from verl_lite.trainer.checkpoint import COMPLETE_MARKER, complete_checkpoints
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
CRASHING_MODE = """
from verl_lite.trainer.ppo.trainer_base import register_trainer
from verl_lite.trainer.ppo.trainer_sync import SyncTrainer


@register_trainer("crash_after_3")
class CrashAfterThree(SyncTrainer):
    def on_step_end(self, step, metrics):
        super().on_step_end(step, metrics)
        if step == 3:
            raise RuntimeError("simulated crash after step 3")
"""


def _comparable(entry: dict) -> dict:
    """Everything but wall-clock measurements."""
    clocks = ("timing_s/", "timing_per_token_ms/", "perf/throughput", "replay_buffer/wait_s")
    return {k: v for k, v in entry.items() if not k.startswith(clocks)}


def _differences(history: list[dict], reference: list[dict], steps: set[int]) -> dict[int, dict]:
    """Per step, the metrics (other than timings) whose values differ: ``{step: {key: (got, expected)}}``."""
    got = {h["step"]: _comparable(h) for h in history if h["step"] in steps}
    want = {h["step"]: _comparable(h) for h in reference if h["step"] in steps}
    assert sorted(got) == sorted(want) == sorted(steps)
    out = {}
    for step in steps:
        keys = got[step].keys() | want[step].keys()
        diff = {
            k: (got[step].get(k), want[step].get(k)) for k in keys if got[step].get(k) != want[step].get(k)
        }
        if diff:
            out[step] = diff
    return out


@pytest.fixture
def eight_prompts(tmp_path):
    path = tmp_path / "train8.parquet"
    pd.read_parquet(os.path.join(EMBEDDED_DATA, "train.parquet")).head(8).to_parquet(path)
    return f"data.train_files={path}"


def test_killed_run_resumes_with_the_same_metrics(tmp_path, eight_prompts):
    full = train(tmp_path / "full", eight_prompts, *COMMON)
    assert [h["step"] for h in full] == [1, 2, 3, 4, 5, 6]
    assert [h["training/epoch"] for h in full] == [0, 0, 1, 1, 2, 2]
    full_ckpts = tmp_path / "full" / "grpo_tiny" / "checkpoints"
    assert [step for step, _ in complete_checkpoints(full_ckpts)] == [4, 6]  # max_ckpt_to_keep=2

    crash = tmp_path / "crash_mode.py"
    crash.write_text(CRASHING_MODE)
    run_dir = tmp_path / "crashed"
    with pytest.raises(Exception, match="simulated crash after step 3"):
        train(run_dir, eight_prompts, *COMMON, f"trainer.extensions=[{crash}]", "trainer.mode=crash_after_3")
    ckpts = run_dir / "grpo_tiny" / "checkpoints"
    assert [step for step, _ in complete_checkpoints(ckpts)] == [2]
    # Leftovers of a crash during a later save: neither may be picked by resume_mode=auto.
    (ckpts / "global_step_3.partial" / "actor").mkdir(parents=True)
    (ckpts / "global_step_4" / "actor").mkdir(parents=True)

    resumed = train(run_dir, eight_prompts, *COMMON)  # resume_mode=auto is the default
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

    # resume_path: continue from a named checkpoint (mid-run, after step 4) into a fresh run folder.
    named = train(
        tmp_path / "named",
        eight_prompts,
        *COMMON,
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={full_ckpts / 'global_step_4'}",
    )
    assert _differences(named, full, {5, 6}) == {}
