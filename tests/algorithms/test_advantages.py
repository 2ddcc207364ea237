"""Token-level estimators: GAE, REINFORCE++ and ReMax (verl_lite/algorithms/advantages.py)."""

import pytest
import torch

from verl_lite.algorithms import (
    EstimatorNeeds,
    compute_discounted_returns,
    compute_gae_advantage_return,
    get_adv_estimator_fn,
    get_adv_estimator_needs,
    register_adv_est,
)


def test_gae_returns_skip_masked_tool_token():
    # One response: token, tool token (mask 0), token. gamma=0.5, lam=1, V = 0.2 everywhere.
    # The tool token is not a time step, so the last reward is discounted once, not twice:
    # R_2 = r_2 = 1;  R_0 = r_0 + gamma * R_2 = 0 + 0.5 * 1 = 0.5;  R_1 = 0 (masked).
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.full((1, 3), 0.2)
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    _, returns = compute_gae_advantage_return(rewards, values, mask, gamma=0.5, lam=1.0)
    torch.testing.assert_close(returns, torch.tensor([[0.5, 0.0, 1.0]]))


def test_gae_lambda_zero_is_one_step_td():
    # lam = 0: A_t = r_t + gamma * V_{t+1} - V_t. gamma = 1, V = [0.5, 0.25], r = [0, 1]:
    # A_0 = 0 + 0.25 - 0.5 = -0.25;  A_1 = 1 + 0 - 0.25 = 0.75. returns = A + V = [0.25, 1.0].
    rewards = torch.tensor([[0.0, 1.0]])
    values = torch.tensor([[0.5, 0.25]])
    _, returns = compute_gae_advantage_return(rewards, values, torch.ones(1, 2), gamma=1.0, lam=0.0)
    torch.testing.assert_close(returns, torch.tensor([[0.25, 1.0]]))


def test_gae_ignores_values_at_masked_positions():
    # Multi-turn: two turns separated by observation tokens (mask 0), then padding.
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0, 0.0], [0.0, 0.0, -1.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0, 0.0, 0.0]])
    values_a = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [0.7, 0.8, 0.9, 1.0, 1.1, 1.2]])
    # Differ only where mask == 0 (including a nan, which must never be read).
    values_b = torch.where(mask == 0, torch.tensor(float("nan")), values_a)
    values_b[0, 2] = 123.0
    adv_a, ret_a = compute_gae_advantage_return(rewards, values_a, mask, gamma=0.9, lam=0.95)
    adv_b, ret_b = compute_gae_advantage_return(rewards, values_b, mask, gamma=0.9, lam=0.95)
    torch.testing.assert_close(adv_a, adv_b)
    torch.testing.assert_close(ret_a, ret_b)
    assert torch.all(adv_a[mask == 0] == 0) and torch.all(ret_a[mask == 0] == 0)


def test_gae_estimator_whitens_advantages_and_needs_values():
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    mask = torch.ones(2, 2)
    gae = get_adv_estimator_fn("gae")
    adv, _ = gae(token_level_rewards=rewards, response_mask=mask, index=None, values=torch.zeros(2, 2))
    # Whitened over the 4 valid tokens: mean 0, unbiased std 1.
    assert abs(adv.mean().item()) < 1e-6 and abs(adv.std().item() - 1.0) < 1e-4
    with pytest.raises(ValueError, match="values"):
        gae(token_level_rewards=rewards, response_mask=mask, index=None)


def test_discounted_returns_carry_through_masked_tokens():
    # gamma = 0.5, rewards [1, 5, 2] with the middle token masked (its reward is ignored):
    # G_2 = 2;  G_0 = 1 + 0.5 * 2 = 2.
    rewards = torch.tensor([[1.0, 5.0, 2.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    returns = compute_discounted_returns(rewards, mask, gamma=0.5)
    torch.testing.assert_close(returns, torch.tensor([[2.0, 0.0, 2.0]]))


def test_reinforce_plus_plus_whitens_returns_over_batch():
    # Outcome rewards 1 and 0 on two one-token rows: returns [1, 0];
    # mean 0.5, unbiased std sqrt(0.5) -> (1 - 0.5) / 0.7071 = +0.7071, and -0.7071.
    rewards = torch.tensor([[1.0], [0.0]])
    fn = get_adv_estimator_fn("reinforce_plus_plus")
    adv, returns = fn(token_level_rewards=rewards, response_mask=torch.ones(2, 1), index=["a", "b"])
    torch.testing.assert_close(adv, torch.tensor([[0.7071], [-0.7071]]), atol=1e-4, rtol=0)
    torch.testing.assert_close(returns, rewards)


def test_remax_subtracts_greedy_reward_baseline():
    # Row 0: reward-to-go [1, 1] minus the greedy baseline 0.25 -> [0.75, 0.75].
    # Row 1: reward-to-go [0, 0] (second token is padding) minus 0.5 -> [-0.5, 0].
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    fn = get_adv_estimator_fn("remax")
    adv, _ = fn(token_level_rewards=rewards, response_mask=mask, reward_baselines=torch.tensor([0.25, 0.5]))
    torch.testing.assert_close(adv, torch.tensor([[0.75, 0.75], [-0.5, 0.0]]))
    with pytest.raises(ValueError, match="reward_baselines"):
        fn(token_level_rewards=rewards, response_mask=mask)


def test_remax_discounts_the_sample_reward_but_not_the_baseline():
    # Three valid tokens, reward 1 on the last, gamma=0.5: G = [0.25, 0.5, 1].
    # The greedy response scored 0.5, so A = G - 0.5 = [-0.25, 0, 0.5]; returns stay G.
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    fn = get_adv_estimator_fn("remax")
    adv, returns = fn(
        token_level_rewards=rewards, response_mask=torch.ones(1, 3), gamma=0.5, reward_baselines=[0.5]
    )
    torch.testing.assert_close(adv, torch.tensor([[-0.25, 0.0, 0.5]]))
    torch.testing.assert_close(returns, torch.tensor([[0.25, 0.5, 1.0]]))


def test_each_builtin_estimator_declares_what_the_step_must_produce_for_it():
    # opo weighs by response length and reinforce_plus_plus_baseline whitens over tokens: not sequence-level
    group, outcome = EstimatorNeeds(groups=True), EstimatorNeeds(groups=True, sequence_level=True)
    expected = {
        "gae": EstimatorNeeds(values=True),
        "remax": EstimatorNeeds(greedy_baseline=True),
        "reinforce_plus_plus": EstimatorNeeds(),
        **dict.fromkeys(("opo", "reinforce_plus_plus_baseline"), group),
        **dict.fromkeys(("grpo", "rloo", "grpo_passk", "gpg"), outcome),
    }
    assert {name: get_adv_estimator_needs(name) for name in expected} == expected


def test_a_registered_estimator_carries_its_needs():
    @register_adv_est("_test_greedy_centered", needs=EstimatorNeeds(greedy_baseline=True))
    def centered(*, token_level_rewards, response_mask, **kwargs):
        return token_level_rewards, token_level_rewards

    assert get_adv_estimator_needs("_test_greedy_centered").greedy_baseline
