"""Clipped value loss (verl_lite/algorithms/value.py)."""

import pytest
import torch

from verl_lite.algorithms import compute_value_loss


def test_value_loss_takes_the_larger_clipped_error():
    # V_old = 0, returns = 1, c = 0.5:
    #   t0: V = 1.0 -> unclipped (1 - 1)^2 = 0, clipped (0.5 - 1)^2 = 0.25 -> 0.5 * 0.25 = 0.125 (clipped)
    #   t1: V = 0.2 -> both (0.2 - 1)^2 = 0.64 -> 0.32
    # token-mean = (0.125 + 0.32) / 2 = 0.2225, clipfrac 1/2.
    vpreds = torch.tensor([[1.0, 0.2]], requires_grad=True)
    loss, metrics = compute_value_loss(vpreds, torch.ones(1, 2), torch.zeros(1, 2), torch.ones(1, 2), 0.5)
    assert loss.item() == pytest.approx(0.2225)
    assert metrics["vf_clipfrac"].item() == pytest.approx(0.5)
    loss.backward()
    # t0's loss comes from the clipped branch (constant in V) -> 0; t1: (0.2 - 1) / 2 = -0.4.
    torch.testing.assert_close(vpreds.grad, torch.tensor([[0.0, -0.4]]))


def test_value_loss_without_clipping_is_half_mse_over_mask():
    # Errors [2, 100 (masked)]: 0.5 * 2^2 = 2 on the one valid token.
    vpreds = torch.tensor([[3.0, 100.0]])
    mask = torch.tensor([[1.0, 0.0]])
    loss, metrics = compute_value_loss(
        vpreds, torch.ones(1, 2), torch.zeros(1, 2), mask, cliprange_value=None
    )
    assert loss.item() == pytest.approx(2.0)
    assert metrics["vf_clipfrac"].item() == 0.0


def test_value_loss_forwards_global_counts_to_agg_loss():
    # One of two micro-batches, 4 tokens in the mini-batch: (0.5 * 1^2 * 2 tokens) / 4 = 0.25.
    vpreds = torch.ones(1, 2)
    loss, _ = compute_value_loss(
        vpreds, torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2), 0.5, "token-mean", global_num_tokens=4
    )
    assert loss.item() == pytest.approx(0.25)
