"""Clip-Cov and KL-Cov (verl_lite/algorithms/covariance_losses.py)."""

import math

import pytest
import torch

from verl_lite.algorithms import get_policy_loss_fn, token_covariance

# A = [3, 0, 0, -1] (mean 0.5) and log pi = [-1, -2, -2, -3] (mean -2):
# cov = (A - 0.5) * (log pi + 2) = [2.5 * 1, -0.5 * 0, -0.5 * 0, -1.5 * -1] = [2.5, 0, 0, 1.5].
ADVANTAGES = torch.tensor([[3.0, 0.0, 0.0, -1.0]])
LOG_PROB = torch.tensor([[-1.0, -2.0, -2.0, -3.0]])


def test_token_covariance_hand_computed():
    cov = token_covariance(ADVANTAGES, LOG_PROB, torch.ones(1, 4))
    torch.testing.assert_close(cov, torch.tensor([[2.5, 0.0, 0.0, 1.5]]))


def test_clip_cov_detaches_tokens_in_the_covariance_band():
    # Band (2, 5) holds only token 0 (cov 2.5); clip_cov_ratio 0.5 of 4 tokens would pick 2,
    # but there is 1 candidate. On-policy (r = 1) token-mean gradient is -A / 4 = [-0.75, 0, 0, 0.25];
    # token 0 is detached -> [0, 0, 0, 0.25].
    log_prob = LOG_PROB.clone().requires_grad_(True)
    config = {"clip_cov_ratio": 0.5, "clip_cov_lb": 2.0, "clip_cov_ub": 5.0}
    loss, metrics = get_policy_loss_fn("clip_cov")(
        LOG_PROB, log_prob, ADVANTAGES, torch.ones(1, 4), config=config
    )
    loss.backward()
    torch.testing.assert_close(log_prob.grad, torch.tensor([[0.0, 0.0, 0.0, 0.25]]))
    assert metrics["pg_cov_clipfrac"].item() == pytest.approx(0.25)


def test_kl_cov_penalises_the_top_covariance_token():
    # kl_cov_ratio 0.25 of 4 tokens -> k = 1, the token with cov 2.5 (token 0).
    # Token 0 is off-policy by log r = 0.5: loss_0 = -3 * e^0.5 + 1.0 * |0.5| = -4.4462;
    # tokens 1, 2 give 0, token 3 gives -(-1) * 1 = 1. token-sum = -3.4462.
    old = LOG_PROB.clone()
    old[0, 0] -= 0.5
    config = {"kl_cov_ratio": 0.25, "kl_cov_coef": 1.0}
    loss, metrics = get_policy_loss_fn("kl_cov")(
        old, LOG_PROB, ADVANTAGES, torch.ones(1, 4), "token-sum", config
    )
    torch.testing.assert_close(loss, torch.tensor(-3 * math.exp(0.5) + 0.5 + 1.0))
    assert metrics["pg_kl_cov_frac"].item() == pytest.approx(0.25)
    assert metrics["pg_clipfrac"].item() == 0.0


def test_kl_cov_coef_scales_the_penalty():
    # As above with kl_cov_coef = 3: loss_0 = -3 e^0.5 + 3 * 0.5, token 3 gives 1 -> -3 e^0.5 + 2.5.
    old = LOG_PROB.clone()
    old[0, 0] -= 0.5
    config = {"kl_cov_ratio": 0.25, "kl_cov_coef": 3.0}
    loss, _ = get_policy_loss_fn("kl_cov")(old, LOG_PROB, ADVANTAGES, torch.ones(1, 4), "token-sum", config)
    torch.testing.assert_close(loss, torch.tensor(-3 * math.exp(0.5) + 2.5))


def test_covariance_losses_ignore_masked_tokens():
    # With only token 3 valid, covariance is 0 everywhere: nothing is in the Clip-Cov band,
    # and the loss equals the plain surrogate of token 3: -(-1) * 1 = 1.
    mask = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    for name in ("clip_cov", "kl_cov"):
        loss, _ = get_policy_loss_fn(name)(LOG_PROB, LOG_PROB, ADVANTAGES, mask)
        torch.testing.assert_close(loss, torch.tensor(1.0))
