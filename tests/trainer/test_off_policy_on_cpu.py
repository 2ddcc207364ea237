"""Off-policy training through main_ppo: the rollout correction of the actor loss."""

import math

from tests.trainer.helpers import train

ACTOR = "actor_rollout_ref.actor"


def test_tis_and_rejection_run_through_main_ppo_and_report_their_metrics(tmp_path):
    # Sync hf rollout on CPU samples with the actor's own weights: every ratio is 1 up to float noise,
    # so the weights stay near 1 and a wide geometric band rejects nothing, while the update trains.
    history = train(
        tmp_path,
        "trainer.total_training_steps=2",
        f"{ACTOR}.rollout_is=token",
        f"{ACTOR}.rollout_is_threshold=1.5",
        f"{ACTOR}.rollout_rs=geometric",
        f"{ACTOR}.rollout_rs_threshold=1.2",
        f"{ACTOR}.rollout_rs_threshold_lower=0.8",
    )
    assert [h["step"] for h in history] == [1, 2]
    for h in history:
        assert math.isclose(h["off_policy/is_weight/mean"], 1.0, abs_tol=1e-3)
        assert h["off_policy/is_weight/max"] <= 1.5
        assert h["off_policy/is_weight/clip_fraction"] == 0.0
        assert h["off_policy/rejected_fraction"] == 0.0
        assert h["actor/grad_norm"] > 0 and math.isfinite(h["actor/pg_loss"])


def test_sequence_rejection_with_an_empty_band_masks_every_trajectory(tmp_path):
    # The band [1.01, 1.02] excludes ratio 1: every trajectory is rejected, so no token carries a loss.
    history = train(
        tmp_path,
        "trainer.total_training_steps=1",
        f"{ACTOR}.rollout_is=sequence",
        f"{ACTOR}.rollout_rs=sequence",
        f"{ACTOR}.rollout_rs_threshold=1.02",
        f"{ACTOR}.rollout_rs_threshold_lower=1.01",
    )
    (h,) = history
    assert h["off_policy/rejected_fraction"] == 1.0
    assert h["actor/pg_loss"] == 0.0 and h["actor/grad_norm"] == 0.0
