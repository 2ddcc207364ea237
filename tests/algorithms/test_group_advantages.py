"""Group-relative estimators: GRPO, RLOO, OPO, Pass@k, GPG, REINFORCE++-baseline."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from verl_lite.algorithms import compute_grpo_outcome_advantage, get_adv_estimator_fn


def _outcome(scores, length=3):
    """Rewards on the last token of full-length rows; returns (token_level_rewards, response_mask)."""
    rewards = torch.zeros(len(scores), length)
    rewards[:, -1] = torch.tensor(scores, dtype=torch.float32)
    return rewards, torch.ones(len(scores), length)


def test_grpo_group_of_four_gives_plus_minus_0866():
    # Scores [1, 0, 1, 0]: mean 0.5; unbiased var = 4 * 0.25 / 3 = 1/3, std = 0.57735;
    # (1 - 0.5) / 0.57735 = 0.8660.
    rewards, mask = _outcome([1, 0, 1, 0])
    adv, returns = compute_grpo_outcome_advantage(rewards, mask, ["q"] * 4)
    expected = torch.tensor([0.8660, -0.8660, 0.8660, -0.8660]).unsqueeze(-1).expand(4, 3)
    torch.testing.assert_close(adv, expected, atol=1e-4, rtol=0)
    torch.testing.assert_close(returns, adv)


def test_grpo_singleton_group_keeps_raw_score():
    # "b" is alone: no baseline, mean 0 and std 1, so its advantage is its score 0.7.
    rewards, mask = _outcome([1, 0, 0.7])
    adv, _ = compute_grpo_outcome_advantage(rewards, mask, np.array(["a", "a", "b"]))
    torch.testing.assert_close(adv[2], torch.full((3,), 0.7))


def test_dr_grpo_subtracts_mean_only():
    # Scores [1, 0, 1, 0] without the std division: 1 - 0.5 = 0.5, 0 - 0.5 = -0.5.
    rewards, mask = _outcome([1, 0, 1, 0])
    fn = get_adv_estimator_fn("grpo")
    adv, _ = fn(
        token_level_rewards=rewards,
        response_mask=mask,
        index=[7] * 4,
        config={"norm_adv_by_std_in_grpo": False},
    )
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.5, -0.5, 0.5, -0.5]))


def test_grpo_groups_by_uid_equality_for_strings_and_ints():
    # Interleaved groups: uid 0 -> scores [1, 0], uid 1 -> [3, 1]; each is +-0.7071 (n=2).
    rewards, mask = _outcome([1, 3, 0, 1])
    fn = get_adv_estimator_fn("grpo")
    by_int, _ = fn(token_level_rewards=rewards, response_mask=mask, index=torch.tensor([0, 1, 0, 1]))
    by_str, _ = fn(
        token_level_rewards=rewards,
        response_mask=mask,
        index=["x", "y", "x", "y"],
        config=SimpleNamespace(epsilon=1e-6),
    )
    torch.testing.assert_close(
        by_int[:, 0], torch.tensor([0.7071, 0.7071, -0.7071, -0.7071]), atol=1e-4, rtol=0
    )
    torch.testing.assert_close(by_int, by_str)
    # A list of 0-dim tensors groups by value, not by object identity.
    by_items, _ = fn(token_level_rewards=rewards, response_mask=mask, index=list(torch.tensor([0, 1, 0, 1])))
    torch.testing.assert_close(by_int, by_items)


def test_grpo_sequence_score_sums_rewards_over_mask():
    # Row 0 score = 0.5 + 0.5 = 1 (the reward on its padding token is ignored); row 1 score 0.
    rewards = torch.tensor([[0.5, 0.5, 9.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    adv, _ = compute_grpo_outcome_advantage(rewards, mask, [0, 0], norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(adv, torch.tensor([[0.5, 0.5, 0.0], [-0.5, -0.5, -0.5]]))


def test_grpo_equal_scores_give_exactly_zero():
    # 0.1 * 3 is not exactly 0.3 in floating point; the result must still be exactly 0.
    rewards, mask = _outcome([0.1, 0.1, 0.1])
    adv, _ = compute_grpo_outcome_advantage(rewards, mask, [0, 0, 0])
    assert torch.all(adv == 0)


def test_rloo_is_reward_minus_mean_of_others():
    # Group [1, 2, 6]: 1 - (2+6)/2 = -3;  2 - (1+6)/2 = -1.5;  6 - (1+2)/2 = 4.5.
    # The lone sample (score 5) keeps its raw score.
    rewards, mask = _outcome([1, 2, 6, 5], length=1)
    fn = get_adv_estimator_fn("rloo")
    adv, returns = fn(token_level_rewards=rewards, response_mask=mask, index=["g", "g", "g", "solo"])
    torch.testing.assert_close(adv[:, 0], torch.tensor([-3.0, -1.5, 4.5, 5.0]))
    torch.testing.assert_close(returns, adv)


def test_reinforce_plus_plus_baseline_centres_by_group_then_whitens_batch():
    # Groups [1, 0] and [3, 1] -> centred [0.5, -0.5, 1, -1] (one token each);
    # batch unbiased var = (0.25 + 0.25 + 1 + 1) / 3 = 0.8333, std 0.9129;
    # 0.5 / 0.9129 = 0.5477, 1 / 0.9129 = 1.0954.
    rewards, mask = _outcome([1, 0, 3, 1], length=1)
    fn = get_adv_estimator_fn("reinforce_plus_plus_baseline")
    adv, _ = fn(token_level_rewards=rewards, response_mask=mask, index=[0, 0, 1, 1])
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.5477, -0.5477, 1.0954, -1.0954]), atol=1e-4, rtol=0)


def test_opo_uses_length_weighted_baseline():
    # Scores [1, 0] with lengths [1, 3]: b = (1*1 + 0*3) / (1 + 3) = 0.25 -> [0.75, -0.25].
    rewards = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    adv, _ = get_adv_estimator_fn("opo")(token_level_rewards=rewards, response_mask=mask, index=[0, 0])
    torch.testing.assert_close(adv, torch.tensor([[0.75, 0.0, 0.0], [-0.25, -0.25, -0.25]]))


def test_grpo_passk_credits_only_the_best_response():
    # Scores [1, 0, 0.5]: best - second = 1 - 0.5 = 0.5; unbiased std = sqrt(0.5 / 2) = 0.5;
    # the best row gets 0.5 / 0.5 = 1, the others 0.
    rewards, mask = _outcome([1, 0, 0.5], length=1)
    adv, _ = get_adv_estimator_fn("grpo_passk")(
        token_level_rewards=rewards, response_mask=mask, index=[0] * 3
    )
    torch.testing.assert_close(adv[:, 0], torch.tensor([1.0, 0.0, 0.0]), atol=1e-5, rtol=0)


def test_gpg_rescales_by_share_of_informative_rows():
    # Groups [1, 0] and [1, 1] (all equal, no signal): alpha = 4 / (4 - 2) = 2.
    # Without std: 2 * (1 - 0.5) = 1, 2 * (0 - 0.5) = -1, and 0 for the equal group.
    rewards, mask = _outcome([1, 0, 1, 1], length=1)
    fn = get_adv_estimator_fn("gpg")
    adv, _ = fn(
        token_level_rewards=rewards,
        response_mask=mask,
        index=[0, 0, 1, 1],
        config={"norm_adv_by_std_in_grpo": False},
    )
    torch.testing.assert_close(adv[:, 0], torch.tensor([1.0, -1.0, 0.0, 0.0]))


def test_group_estimators_reject_missing_or_misaligned_index():
    rewards, mask = _outcome([1, 0])
    with pytest.raises(ValueError, match="index"):
        get_adv_estimator_fn("grpo")(token_level_rewards=rewards, response_mask=mask)
    with pytest.raises(ValueError, match="2 rows"):
        get_adv_estimator_fn("rloo")(token_level_rewards=rewards, response_mask=mask, index=[0, 0, 0])
