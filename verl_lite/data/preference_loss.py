"""Bradley-Terry loss of a reward model on preference pairs (pure torch).

The model of Bradley and Terry (1952) gives P(chosen > rejected) = sigmoid(r_chosen - r_rejected);
the loss is its negative log-likelihood, as in InstructGPT (https://arxiv.org/abs/2203.02155).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["bradley_terry_loss"]


def bradley_terry_loss(
    chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Mean of -log sigmoid(r_chosen - r_rejected) over the pairs.

    Args:
        chosen_rewards: (batch,) scalar rewards of the preferred responses.
        rejected_rewards: (batch,) scalar rewards of the other responses, row-aligned.

    Returns:
        ``(loss, metrics)``: 0-dim loss; ``metrics["accuracy"]`` is the fraction of pairs with
        r_chosen > r_rejected and ``metrics["margin"]`` the mean r_chosen - r_rejected (both detached).
    """
    if chosen_rewards.shape != rejected_rewards.shape:
        raise ValueError(
            f"bradley_terry_loss: shapes differ ({tuple(chosen_rewards.shape)} vs {tuple(rejected_rewards.shape)})."
        )
    margin = chosen_rewards - rejected_rewards
    # logsigmoid is stable for large |margin|, unlike log(sigmoid(.))
    loss = -F.logsigmoid(margin).mean()
    metrics = {
        "accuracy": (margin > 0).float().mean().detach(),
        "margin": margin.mean().detach(),
    }
    return loss, metrics
