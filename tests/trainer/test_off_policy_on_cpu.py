"""Off-policy training through main_ppo: the rollout correction of the actor loss, trainer.mode=one_step_off."""

import math
import os

import pandas as pd
import pytest

from tests.trainer.helpers import crashing_mode, dumped_generations, joining, train
from verl_lite.trainer.checkpoint import complete_checkpoints, load_trainer_state
from verl_lite.trainer.validation import EMBEDDED_DATA

CORRECTION = "algorithm.rollout_correction"


def test_tis_and_rejection_run_through_main_ppo_and_report_their_metrics(tmp_path, cluster):
    # Sync hf rollout on CPU samples with the actor's own weights: every ratio is 1 up to float noise,
    # so the weights stay near 1 and a wide geometric band rejects nothing, while the update trains.
    history = train(
        tmp_path,
        *joining(cluster),
        "trainer.total_training_steps=2",
        f"{CORRECTION}.rollout_is=token",
        f"{CORRECTION}.rollout_is_threshold=1.5",
        f"{CORRECTION}.rollout_rs=geometric",
        f"{CORRECTION}.rollout_rs_threshold=1.2",
        f"{CORRECTION}.rollout_rs_threshold_lower=0.8",
    )
    assert [h["step"] for h in history] == [1, 2]
    for h in history:
        assert math.isclose(h["off_policy/is_weight/mean"], 1.0, abs_tol=1e-3)
        assert h["off_policy/is_weight/max"] <= 1.5
        assert h["off_policy/is_weight/clip_fraction"] == 0.0
        assert h["off_policy/rejected_fraction"] == 0.0
        assert h["actor/grad_norm"] > 0 and math.isfinite(h["actor/pg_loss"])


def test_sequence_rejection_with_an_empty_band_masks_every_trajectory(tmp_path, cluster):
    # The band [1.01, 1.02] excludes ratio 1: every trajectory is rejected, so no token carries a loss.
    history = train(
        tmp_path,
        *joining(cluster),
        "trainer.total_training_steps=1",
        f"{CORRECTION}.rollout_is=sequence",
        f"{CORRECTION}.rollout_rs=sequence",
        f"{CORRECTION}.rollout_rs_threshold=1.02",
        f"{CORRECTION}.rollout_rs_threshold_lower=1.01",
    )
    (h,) = history
    assert h["off_policy/rejected_fraction"] == 1.0
    assert h["actor/pg_loss"] == 0.0 and h["actor/grad_norm"] == 0.0


# ---- trainer.mode=one_step_off --------------------------------------------------------------------
# The rollout on one hf server of its own with one agent-loop worker (standalone's defaults): one_step_off
# generates there while the trainer's process trains.
ONE_SERVER = "actor_rollout_ref.rollout.mode=standalone"

# A one_step_off trainer that dies right after step 2 was logged and checkpointed.
CRASHING_MODE = crashing_mode(
    "one_step_off_crash_after_2",
    "verl_lite.trainer.ppo.trainer_one_step_off",
    "OneStepOffTrainer",
    after_step=2,
)


def test_one_step_off_trains_each_batch_one_version_stale_and_each_prompt_once(tmp_path, cluster):
    dumps = tmp_path / "dumps"
    history = train(
        tmp_path,
        *joining(cluster),
        "trainer.mode=one_step_off",
        ONE_SERVER,
        "trainer.total_training_steps=3",
        f"trainer.rollout_data_dir={dumps}",
        f"{CORRECTION}.rollout_is=token",
    )
    assert [h["step"] for h in history] == [1, 2, 3]
    # step 1 trains on the initial weights' samples; later batches were generated while the step before
    # trained, with the weights from before that step's update
    assert [h["async/staleness/max"] for h in history] == [0.0, 1.0, 1.0]
    assert [h["async/staleness/mean"] for h in history] == [0.0, 1.0, 1.0]
    for h in history:
        assert h["async/trainer_idle_s"] >= 0 and h["timing_s/update_weights"] > 0
        assert h["update_weights/bytes"] > 0 and h["actor/grad_norm"] > 0
        assert 0 < h["off_policy/is_weight/mean"] and h["off_policy/is_weight/max"] <= 2.0
    # the initial weights serve steps 1 and 2; the weights after step 1 (version 1) serve step 3
    steps = dumped_generations(dumps)
    assert {s: {row["weight_version"] for row in rows} for s, rows in steps.items()} == {
        1: {-1},
        2: {-1},
        3: {1},
    }
    uids = [row["uid"] for rows in steps.values() for row in rows]
    assert len(uids) == 3 * 4 * 4 and len(set(uids)) == 3 * 4  # 4 prompts x 4 samples a step, each uid once
    assert all(len({row["step"] for row in steps[s]}) == 1 for s in steps)


def test_one_step_off_resumes_with_the_prefetched_batch_and_trains_each_prompt_once(tmp_path, cluster):
    data = tmp_path / "train8.parquet"
    pd.read_parquet(os.path.join(EMBEDDED_DATA, "train.parquet")).head(8).to_parquet(data)
    crash = tmp_path / "crash_mode.py"
    crash.write_text(CRASHING_MODE)
    dumps, run_dir = tmp_path / "dumps", tmp_path / "run"
    common = [
        f"data.train_files={data}",
        ONE_SERVER,
        "trainer.total_epochs=2",  # 2 steps an epoch
        "trainer.total_training_steps=3",
        "trainer.save_freq=2",
        f"trainer.rollout_data_dir={dumps}",
    ]
    with pytest.raises(Exception, match="simulated crash after step 2"):
        train(
            run_dir,
            *joining(cluster),
            *common,
            f"trainer.extensions=[{crash}]",
            "trainer.mode=one_step_off_crash_after_2",
        )
    # the checkpoint of step 2 holds step 3's batch, generated during step 2 (uids submitted at step 2)
    resumed = train(run_dir, *joining(cluster), *common, "trainer.mode=one_step_off")
    assert [h["step"] for h in resumed] == [1, 2, 3]
    assert resumed[-1]["async/staleness/max"] == 1.0
    steps = dumped_generations(dumps)
    assert sorted(steps) == [1, 2, 3]
    assert {row["uid"].split("-")[0] for row in steps[3]} == {"train2"}  # not generated again
    prompts = {s: {row["prompt"] for row in rows} for s, rows in steps.items()}
    # epoch 0 (steps 1 and 2) trains all 8 prompts once each; step 3 starts epoch 1
    assert len(prompts[1]) == len(prompts[2]) == len(prompts[3]) == 4
    assert len(prompts[1] | prompts[2]) == 8
    uids = [row["uid"] for rows in steps.values() for row in rows]
    assert len(set(uids)) == 12 and all(uids.count(u) == 4 for u in set(uids))
    # 12 prompts submitted in all (steps 1, 2 and 3; none after the last): step 3 was not drawn again
    _, last = complete_checkpoints(run_dir / "grpo_tiny" / "checkpoints")[-1]
    assert load_trainer_state(last)["submitted"] == 12
