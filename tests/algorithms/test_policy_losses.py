"""Ratio-based and plain policy-gradient losses (verl_lite/algorithms/policy_losses.py)."""

import math

import pytest
import torch

from verl_lite.algorithms import PolicyLossConfig, get_policy_loss_fn


def _inputs(ratios, advantages):
    """One row with the given ratios: old log-probs 0 and log pi = log r (leaf, for gradients)."""
    log_prob = torch.log(torch.tensor([ratios])).requires_grad_(True)
    return torch.zeros(1, len(ratios)), log_prob, torch.tensor([advantages]), torch.ones(1, len(ratios))


def test_vanilla_clip_fractions_and_dual_clip_bound():
    # r = [1.5, 0.5, 1.0, 4.0], A = [1, 1, -1, -1], eps = 0.2, c = 3:
    #   t0: max(-1.5, -1.2) = -1.2 (clipped)    t1: max(-0.5, -0.8) = -0.5
    #   t2: max(1, 1) = 1                       t3: max(4, 1.2) = 4, capped by dual clip at -A*c = 3
    # token-mean = (-1.2 - 0.5 + 1 + 3) / 4 = 0.575; clipfrac 1/4, clipfrac_lower 1/4.
    old, log_prob, adv, mask = _inputs([1.5, 0.5, 1.0, 4.0], [1.0, 1.0, -1.0, -1.0])
    loss, metrics = get_policy_loss_fn("vanilla")(old, log_prob, adv, mask, "token-mean", None)
    torch.testing.assert_close(loss, torch.tensor(0.575))
    assert metrics["pg_clipfrac"].item() == pytest.approx(0.25)
    assert metrics["pg_clipfrac_lower"].item() == pytest.approx(0.25)
    loss.backward()
    # Clipped tokens carry no gradient; t1: d(-A r)/dlog pi = -A r / 4 = -0.125; t2: +1 * 1 / 4.
    torch.testing.assert_close(log_prob.grad, torch.tensor([[0.0, -0.125, 0.25, 0.0]]))


def test_vanilla_clip_higher_raises_upper_bound_only():
    # DAPO clip-higher: clip_ratio_high = 0.28 -> t0 (r = 1.5, A = 1) is clipped to -1.28;
    # t1 (r = 0.5, A = -1) is clipped below at 0.8 -> max(0.5, 0.8) = 0.8. Sum = -0.48.
    old, log_prob, adv, mask = _inputs([1.5, 0.5], [1.0, -1.0])
    config = {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28}
    loss, metrics = get_policy_loss_fn("vanilla")(old, log_prob, adv, mask, "token-sum", config)
    torch.testing.assert_close(loss, torch.tensor(-0.48))
    assert metrics["pg_clipfrac"].item() == pytest.approx(1.0)


def test_vanilla_ratio_comes_from_clamped_log_ratio():
    # log pi - log pi_old = 100 is clamped to 20: the ratio is e^20, not inf, and ppo_kl = -20.
    old = torch.tensor([[-100.0]])
    log_prob = torch.zeros(1, 1)
    _, metrics = get_policy_loss_fn("vanilla")(old, log_prob, torch.tensor([[-1.0]]), torch.ones(1, 1))
    assert metrics["ppo_kl"].item() == pytest.approx(-20.0)
    loss, _ = get_policy_loss_fn("reinforce")(old, log_prob, torch.tensor([[-1.0]]), torch.ones(1, 1))
    assert math.isfinite(loss.item())


def test_gspo_clips_the_sequence_level_ratio():
    # Token ratios [2, 1]: sequence ratio = exp((log 2 + 0) / 2) = sqrt(2) = 1.414 > 1.2,
    # so both tokens are clipped: loss = -1 * 1.2 per token, token-mean -1.2, clipfrac 1.
    old, log_prob, adv, mask = _inputs([2.0, 1.0], [1.0, 1.0])
    loss, metrics = get_policy_loss_fn("gspo")(old, log_prob, adv, mask, "token-mean", PolicyLossConfig())
    torch.testing.assert_close(loss, torch.tensor(-1.2))
    assert metrics["pg_clipfrac"].item() == pytest.approx(1.0)


def test_gspo_gradient_uses_sequence_ratio_per_token():
    # Token ratios [1.1, 1.0] (inside the clip): sequence ratio s = sqrt(1.1) = 1.0488;
    # d/dlog pi_t of -A * sg(s) * pi_t / sg(pi_t) = -A * s; token-sum, A = 1 -> -1.0488 each.
    old, log_prob, adv, mask = _inputs([1.1, 1.0], [1.0, 1.0])
    loss, _ = get_policy_loss_fn("gspo")(old, log_prob, adv, mask, "token-sum")
    loss.backward()
    torch.testing.assert_close(log_prob.grad, torch.full((1, 2), -math.sqrt(1.1)))


def test_sapo_gradient_matches_policy_gradient_on_policy():
    # At r = 1: d/dr [(4/tau) sigmoid(tau (r - 1))] = 4 * sigmoid(0) * (1 - sigmoid(0)) = 1,
    # so dL/dlog pi = -A * r * 1 = -A for both temperatures: A = [2, -3] -> [-2, 3].
    old, log_prob, adv, mask = _inputs([1.0, 1.0], [2.0, -3.0])
    loss, metrics = get_policy_loss_fn("sapo")(old, log_prob, adv, mask, "token-sum")
    loss.backward()
    torch.testing.assert_close(log_prob.grad, torch.tensor([[-2.0, 3.0]]))
    assert metrics["pg_clipfrac"].item() == 0.0


def test_sapo_temperatures_set_the_gate_of_each_advantage_sign():
    # r = [1.5, 1.5], A = [1, -1], tau_pos = 2, tau_neg = 4 (token-sum):
    #   t0: -1 * (4/2) sigmoid(2 * 0.5) = -2 * 0.73106 = -1.46212
    #   t1: +1 * (4/4) sigmoid(4 * 0.5) = 0.88080;          loss = -0.58132
    # dL/dlog pi = -A * 4 s (1 - s) * r: t0 = -4 * 0.19661 * 1.5 = -1.17967, t1 = 4 * 0.10499 * 1.5 = 0.62996
    # (the larger tau_neg shrinks the gradient of the negative token more).
    old, log_prob, adv, mask = _inputs([1.5, 1.5], [1.0, -1.0])
    config = {"sapo_tau_pos": 2.0, "sapo_tau_neg": 4.0}
    loss, _ = get_policy_loss_fn("sapo")(old, log_prob, adv, mask, "token-sum", config)
    loss.backward()
    torch.testing.assert_close(loss, torch.tensor(-0.58132), atol=1e-5, rtol=0)
    torch.testing.assert_close(log_prob.grad, torch.tensor([[-1.17967, 0.62996]]), atol=1e-5, rtol=0)


def test_cispo_clip_bounds_come_from_the_config():
    # r = [2, 0.5], A = 1, cispo_clip_ratio_low = 0.2, cispo_clip_ratio_high = 0.5:
    # weights clamp(r, 0.8, 1.5) = [1.5, 0.8] -> dL/dlog pi = [-1.5, -0.8]; both truncated.
    old, log_prob, adv, mask = _inputs([2.0, 0.5], [1.0, 1.0])
    config = {"cispo_clip_ratio_low": 0.2, "cispo_clip_ratio_high": 0.5}
    loss, metrics = get_policy_loss_fn("cispo")(old, log_prob, adv, mask, "token-sum", config)
    loss.backward()
    torch.testing.assert_close(log_prob.grad, torch.tensor([[-1.5, -0.8]]))
    assert metrics["pg_clipfrac"].item() == pytest.approx(0.5)
    assert metrics["pg_clipfrac_lower"].item() == pytest.approx(0.5)


def test_log_ratio_clamp_bounds_the_ratio():
    # log r = [3, -3] clamped to +-1 -> r = [e, 1/e]; with A = 1 and the clip range opened to
    # [0, 11], vanilla's token-mean loss is -(e + 1/e) / 2 (unclamped it would be -(e^3 + e^-3) / 2).
    old = torch.zeros(1, 2)
    log_prob = torch.tensor([[3.0, -3.0]])
    config = {"log_ratio_clamp": 1.0, "clip_ratio_low": 1.0, "clip_ratio_high": 10.0}
    loss, _ = get_policy_loss_fn("vanilla")(old, log_prob, torch.ones(1, 2), torch.ones(1, 2), config=config)
    torch.testing.assert_close(loss, torch.tensor(-(math.e + 1 / math.e) / 2))


def test_cispo_truncates_the_stop_gradient_weight():
    # r = [2, 0.5], A = 1: weights clamp(r, 0, 1.28) = [1.28, 0.5] (detached);
    # L = -w * A * log pi -> dL/dlog pi = -w = [-1.28, -0.5]; clipfrac (upper) = 1/2.
    old, log_prob, adv, mask = _inputs([2.0, 0.5], [1.0, 1.0])
    loss, metrics = get_policy_loss_fn("cispo")(old, log_prob, adv, mask, "token-sum")
    loss.backward()
    torch.testing.assert_close(log_prob.grad, torch.tensor([[-1.28, -0.5]]))
    assert metrics["pg_clipfrac"].item() == pytest.approx(0.5)
    assert metrics["pg_clipfrac_lower"].item() == 0.0


def test_reinforce_and_gpg_are_minus_advantage_times_log_prob():
    # log pi = [log 0.5, log 0.25], A = [1, -2]: L = -(1 * -0.6931) - (-2 * -1.3863) = -2.0794.
    old, log_prob, adv, mask = _inputs([0.5, 0.25], [1.0, -2.0])
    for name in ("reinforce", "gpg"):
        loss, metrics = get_policy_loss_fn(name)(old, log_prob, adv, mask, "token-sum")
        torch.testing.assert_close(loss, torch.tensor(-2.0794), atol=1e-4, rtol=0)
        assert set(metrics) >= {"pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"}


def test_policy_loss_config_rejects_bad_values():
    with pytest.raises(ValueError, match=r"sapo_tau_neg=0.0 is invalid; use a temperature > 0"):
        PolicyLossConfig(sapo_tau_neg=0.0)
    with pytest.raises(ValueError, match=r"clip_cov_lb=5.0 must be < clip_cov_ub=5.0"):
        PolicyLossConfig(clip_cov_lb=5.0)
    with pytest.raises(ValueError, match="clip_ratio_c"):
        PolicyLossConfig(clip_ratio_c=0.5)
    with pytest.raises(ValueError, match="clip_ratio_low"):
        PolicyLossConfig.from_any({"clip_ratio_low": -0.1})
    # Unrelated keys of a larger config are ignored; None means "default".
    assert PolicyLossConfig.from_any({"ppo_epochs": 4, "clip_ratio_high": None}) == PolicyLossConfig()
