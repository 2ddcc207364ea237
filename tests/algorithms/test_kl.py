"""KL estimators, the reward penalty and the coefficient controllers (verl_lite/algorithms/kl.py)."""

import math

import pytest
import torch

from verl_lite.algorithms import (
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    build_kl_controller,
    kl_penalty,
)

LN2 = math.log(2.0)


def test_kl_estimators_hand_computed():
    # d = log pi - log pi_ref = log 2:  k1 = 0.6931, abs = 0.6931, k2 = d^2 / 2 = 0.2402,
    # k3 = exp(-d) + d - 1 = 0.5 + 0.6931 - 1 = 0.1931.
    log_prob, ref = torch.tensor([[0.0]]), torch.tensor([[-LN2]])
    expected = {
        "kl": LN2,
        "k1": LN2,
        "abs": LN2,
        "mse": LN2**2 / 2,
        "k2": LN2**2 / 2,
        "low_var_kl": 0.5 + LN2 - 1,
        "k3": 0.5 + LN2 - 1,
    }
    for name, value in expected.items():
        assert kl_penalty(log_prob, ref, name).item() == pytest.approx(value, abs=1e-6), name


def test_k3_is_clamped_for_extreme_log_ratios():
    # d = -50: exp(50) would dominate; d is clamped to -20 and k3 to 10.
    assert kl_penalty(torch.tensor([[0.0]]), torch.tensor([[50.0]]), "k3").item() == 10.0


def test_straight_through_variants_share_forward_and_take_k2_gradient():
    # Forward of "<name>+" equals "<name>"; the gradient of k2 = d^2/2 w.r.t. log pi is d.
    ref = torch.tensor([[-LN2, 0.3, -1.0]])
    for name in ("k1", "abs", "k3", "low_var_kl"):
        log_prob = torch.tensor([[0.0, 0.0, -0.5]], requires_grad=True)
        plus = kl_penalty(log_prob, ref, name + "+")
        torch.testing.assert_close(plus, kl_penalty(log_prob, ref, name))
        plus.sum().backward()
        torch.testing.assert_close(log_prob.grad, (log_prob - ref).detach())


def test_unknown_kl_estimator_lists_known_names():
    with pytest.raises(KeyError, match="low_var_kl"):
        kl_penalty(torch.zeros(1, 1), torch.zeros(1, 1), "k4")


def test_apply_kl_penalty_subtracts_coef_times_kl_on_valid_tokens():
    # k1 = old - ref = [0.5, 1.0 (masked)]; rewards = scores - 0.1 * k1 = [1 - 0.05, 2] on row 0.
    scores = torch.tensor([[1.0, 2.0]])
    old, ref = torch.tensor([[0.0, 0.0]]), torch.tensor([[-0.5, -1.0]])
    mask = torch.tensor([[1.0, 0.0]])
    rewards, metrics = apply_kl_penalty(scores, old, ref, mask, kl_coef=0.1, kl_penalty="kl")
    torch.testing.assert_close(rewards, torch.tensor([[0.95, 2.0]]))
    assert metrics["reward_kl"].item() == pytest.approx(0.5)
    assert metrics["reward_kl_coef"].item() == pytest.approx(0.1)


def test_adaptive_controller_update_and_checkpoint_round_trip():
    # KL 2 with target 1: error = clip(2/1 - 1, -0.2, 0.2) = 0.2;
    # value = 0.1 * (1 + 0.2 * 5 / 10) = 0.11.
    ctrl = AdaptiveKLController(init_kl_coef=0.1, target_kl=1.0, horizon=10)
    ctrl.update(torch.tensor(2.0), n_steps=5)
    assert ctrl.value == pytest.approx(0.11)
    restored = AdaptiveKLController(init_kl_coef=0.5, target_kl=3.0, horizon=1)
    restored.load_state_dict(ctrl.state_dict())
    assert (restored.value, restored.target_kl, restored.horizon) == (ctrl.value, 1.0, 10)


def test_fixed_controller_and_builder():
    fixed = build_kl_controller({"type": "fixed", "kl_coef": 0.2})
    fixed.update(100.0, n_steps=8)
    assert isinstance(fixed, FixedKLController) and fixed.value == 0.2
    other = FixedKLController(0.0)
    other.load_state_dict(fixed.state_dict())
    assert other.value == 0.2
    adaptive = build_kl_controller({"type": "adaptive", "kl_coef": 0.05, "target_kl": 0.2})
    assert isinstance(adaptive, AdaptiveKLController) and adaptive.horizon == 10000
    with pytest.raises(KeyError, match="adaptive"):
        build_kl_controller({"type": "pid"})
