"""What must hold at step 1 of main_ppo, when the actor, the old policy and the reference are one model.

One run covers the reference policy, the KL loss, KL in the reward and the separate old-log-prob
pass; a second step checks that the quantities that were 0 are live once the actor has moved.
"""

import pytest

from tests.trainer.helpers import train

KL_COEF, TARGET_KL, HORIZON = 0.001, 0.1, 10000
TRAJECTORIES = 4 * 4  # FAST: 4 prompts x 4 samples


def test_kl_terms_ratio_and_clipping_vanish_at_step_1_and_are_live_at_step_2(tmp_path):
    history = train(
        tmp_path,
        "trainer.total_training_steps=2",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.actor.old_log_prob=recompute",
        "algorithm.use_kl_in_reward=true",
        "algorithm.kl_penalty=kl",
        "algorithm.kl_ctrl.type=adaptive",
        f"algorithm.kl_ctrl.kl_coef={KL_COEF}",
        f"algorithm.kl_ctrl.target_kl={TARGET_KL}",
        f"algorithm.kl_ctrl.horizon={HORIZON}",
        # A large step, so that step 2's KL stands far above float32 rounding.
        "actor_rollout_ref.actor.optim.lr=1e-3",
        # The update then reads its single micro-batch with the same rows, in the same order and
        # padding, as the old- and reference-log-prob passes (16 rows <= both micro-batch sizes).
        "actor_rollout_ref.actor.shuffle=false",
    )
    first, second = history
    assert "timing_s/ref" in first and "timing_s/old_log_prob" in first
    # At step 1 the actor, the old policy and the reference hold the same weights and the three
    # passes run the same kernels on the same tensors, so their log-probs agree bit for bit: every
    # log-ratio is exactly 0, hence so are ppo_kl, the clip fractions, the KL loss
    # (exp(0) - 0 - 1 = 0) and the reward penalty (old - ref = 0), and rewards equal scores.
    assert first["actor/ppo_kl"] == 0.0
    assert first["actor/pg_clipfrac"] == 0.0 and first["actor/pg_clipfrac_lower"] == 0.0
    assert first["actor/kl_loss"] == 0.0
    assert first["actor/reward_kl_penalty/max"] == 0.0 and first["actor/reward_kl_penalty/min"] == 0.0
    assert first["critic/rewards/mean"] == first["critic/score/mean"]
    # The adaptive controller saw KL 0 < target: error clips to -0.2, value *= 1 - 0.2 * n / horizon.
    assert first["actor/reward_kl_penalty_coeff"] == pytest.approx(
        KL_COEF * (1 - 0.2 * TRAJECTORIES / HORIZON), rel=1e-12
    )
    # Step 2: the actor took a step, the reference did not (k3's float32 rounding is ~1e-7).
    assert second["actor/kl_loss"] > 1e-4
    assert second["actor/reward_kl_penalty/max"] > second["actor/reward_kl_penalty/min"]
