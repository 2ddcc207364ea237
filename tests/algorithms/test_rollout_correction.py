"""Off-policy correction against the rollout's log-probs (verl_lite/algorithms/rollout_correction.py)."""

import math

import pytest
import torch

from verl_lite.algorithms import (
    RolloutCorrectionConfig,
    compute_rollout_correction,
    get_policy_loss_fn,
    rollout_correction_problems,
)


def _batch():
    """Two rows; log pi_old - log pi_rollout per token, row 1 has a tool token (mask 0) and padding."""
    log_ratio = torch.tensor([[math.log(3.0), math.log(0.5), 0.0], [math.log(1.5), math.log(100.0), 0.0]])
    rollout = torch.full((2, 3), -1.0, dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    return rollout + log_ratio.double(), rollout, mask


def test_token_tis_weights_are_the_ratio_truncated_at_the_cap():
    # rho = [[3, 0.5, 1], [1.5, (tool), (pad)]]; cap 2: w = [[2, 0.5, 1], [1.5, 0, 0]]; clipped: t(0, 0) only.
    old, rollout, mask = _batch()
    weights, kept, clipped = compute_rollout_correction(old, rollout, mask, {"rollout_is": "token"})
    torch.testing.assert_close(weights, torch.tensor([[2.0, 0.5, 1.0], [1.5, 0.0, 0.0]], dtype=torch.float64))
    torch.testing.assert_close(kept, mask)
    assert clipped.tolist() == [[True, False, False], [False, False, False]]


def test_sequence_is_weight_is_the_truncated_product_of_the_sampled_tokens():
    # row 0: 3 * 0.5 * 1 = 1.5 (under cap 2); row 1: 1.5 (the tool token's ratio 100 is not counted).
    old, rollout, mask = _batch()
    weights, _, clipped = compute_rollout_correction(old, rollout, mask, {"rollout_is": "sequence"})
    torch.testing.assert_close(weights, torch.tensor([[1.5, 1.5, 1.5], [1.5, 0.0, 0.0]], dtype=torch.float64))
    assert not clipped.any()


def test_sequence_rejection_masks_trajectories_outside_the_band():
    # Sequence ratios 1.5 and 1.5; band [0.5, 1.2] rejects both; band [0.5, 2] keeps both.
    # Geometric means: row 0 (3 * 0.5 * 1)^(1/3) = 1.1447, row 1 1.5; band [0.9, 1.2] keeps row 0 only.
    old, rollout, mask = _batch()
    config = {"rollout_rs": "sequence", "rollout_rs_threshold": 1.2, "rollout_rs_threshold_lower": 0.5}
    weights, kept, _ = compute_rollout_correction(old, rollout, mask, config)
    assert kept.sum() == 0 and weights.sum() == 0
    _, kept, _ = compute_rollout_correction(old, rollout, mask, {"rollout_rs": "sequence"})  # band [1/2, 2]
    torch.testing.assert_close(kept, mask)
    config = {"rollout_rs": "geometric", "rollout_rs_threshold": 1.2, "rollout_rs_threshold_lower": 0.9}
    weights, kept, _ = compute_rollout_correction(old, rollout, mask, config)
    torch.testing.assert_close(kept, torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))
    torch.testing.assert_close(weights, kept.double())


def test_tis_weighted_vanilla_loss_equals_the_hand_computation():
    # pi = pi_old (ratio 1, no PPO clip), A = 1 on every token: the vanilla token loss is -1 per token.
    # TIS weights [[2, 0.5, 1], [1.5]] over the 4 sampled tokens: token-mean = -(2 + 0.5 + 1 + 1.5) / 4 = -1.25,
    # and d loss / d log pi = -w / 4 on each sampled token.
    old, rollout, mask = _batch()
    weights, kept, _ = compute_rollout_correction(old, rollout, mask, {"rollout_is": "token"})
    log_prob = old.clone().requires_grad_(True)
    loss, _ = get_policy_loss_fn("vanilla")(
        old, log_prob, torch.ones(2, 3, dtype=torch.float64), kept, loss_weights=weights
    )
    torch.testing.assert_close(loss, torch.tensor(-1.25, dtype=torch.float64))
    loss.backward()
    torch.testing.assert_close(log_prob.grad, -weights / 4)


def test_rejected_trajectory_leaves_the_loss_and_its_token_count():
    # Token rejection with band [1/2.5, 2.5] = [0.4, 2.5]: t(0, 0) (rho 3) is masked out; A = [[1, 2, 3], [4]]:
    # token-mean over the 3 kept tokens = -(2 + 3 + 4) / 3 = -3.
    old, rollout, mask = _batch()
    config = {"rollout_rs": "token", "rollout_rs_threshold": 2.5}
    weights, kept, _ = compute_rollout_correction(old, rollout, mask, config)
    advantages = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]], dtype=torch.float64)
    loss, _ = get_policy_loss_fn("vanilla")(old, old.clone(), advantages, kept, loss_weights=weights)
    torch.testing.assert_close(loss, torch.tensor(-3.0, dtype=torch.float64))


def test_invalid_rollout_correction_values_are_named():
    problems = rollout_correction_problems(
        {"rollout_is": "tokens", "rollout_is_threshold": 0, "rollout_rs": "token", "rollout_rs_threshold": -1}
    )
    assert problems == [
        "rollout_is='tokens' is invalid; use null or one of geometric, sequence, token.",
        "rollout_is_threshold=0 is invalid; use a number > 0 (the weight cap).",
        "rollout_rs_threshold=-1 is invalid; use null or a ratio > 0.",
    ]
    # the dataclass is the algorithm.rollout_correction yaml group: its errors name the full key
    band = "algorithm.rollout_correction.rollout_rs_threshold_lower=3 must be < algorithm.rollout_correction.rollout_rs_threshold=2"
    with pytest.raises(ValueError, match=band):
        RolloutCorrectionConfig(rollout_rs="sequence", rollout_rs_threshold=2, rollout_rs_threshold_lower=3)
