"""Bradley-Terry loss: its value, its metrics and the direction of its gradient."""

from __future__ import annotations

import math

import torch

from verl_lite.data.preference_loss import bradley_terry_loss


def test_loss_and_metrics_match_hand_computation():
    chosen, rejected = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0])
    loss, metrics = bradley_terry_loss(chosen, rejected)
    # margins [1, 0]: loss = (-log sigmoid(1) - log sigmoid(0)) / 2 = (0.31326 + 0.69315) / 2
    assert math.isclose(loss.item(), (math.log1p(math.exp(-1)) + math.log(2)) / 2, rel_tol=1e-6)
    assert metrics["accuracy"].item() == 0.5  # a tie does not count as correct
    assert metrics["margin"].item() == 0.5


def test_gradient_descent_pushes_chosen_above_rejected():
    chosen = torch.tensor([0.0, -1.0, 0.5], requires_grad=True)
    rejected = torch.tensor([0.0, 1.0, 0.5], requires_grad=True)
    loss, _ = bradley_terry_loss(chosen, rejected)
    loss.backward()
    # d loss / d r_chosen = -sigmoid(-margin) / batch < 0: every chosen reward is pushed up
    assert (chosen.grad < 0).all() and (rejected.grad > 0).all()
    optimizer = torch.optim.SGD([chosen, rejected], lr=1.0)
    for _ in range(20):
        optimizer.zero_grad()
        bradley_terry_loss(chosen, rejected)[0].backward()
        optimizer.step()
    new_loss, metrics = bradley_terry_loss(chosen, rejected)
    assert new_loss < loss and metrics["accuracy"].item() == 1.0
