"""The critic's loss: clipped squared error between predicted values and GAE returns.

PPO (https://arxiv.org/abs/1707.06347) limits how far one update may move the value head, the
same way the policy ratio is clipped: the new prediction is also evaluated after clipping it to
``values +- cliprange_value``, and the larger (more pessimistic) of the two squared errors is
used. The clip fraction tells how often the clipped branch wins; near 1 means the value head
wants to move much further than allowed (raise the range or lower the learning rate).
"""

from __future__ import annotations

from typing import Any

import torch

from .aggregation import agg_loss
from .token_stats import masked_mean

__all__ = ["compute_value_loss"]


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float | None = 0.5,
    loss_agg_mode: str = "token-mean",
    **agg_kwargs: Any,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped value loss 0.5 * max((V - R)^2, (clip(V, V_old - c, V_old + c) - R)^2), aggregated.

    Args:
        vpreds: (batch, response_len) values predicted by the critic being trained.
        returns: (batch, response_len) targets, the ``returns`` of the advantage estimator.
        values: (batch, response_len) the critic's values at rollout time (V_old).
        response_mask: (batch, response_len); masked positions carry no loss.
        cliprange_value: c, in value units; None disables clipping (plain 0.5 * MSE).
        loss_agg_mode: passed to ``agg_loss``, as are ``agg_kwargs`` (``global_num_tokens``,
            ``global_num_seqs``, ``dp_size``, ``norm_length``).

    Returns:
        loss: 0-dim tensor with gradient to ``vpreds``.
        metrics: ``vf_clipfrac``, the fraction of valid tokens where the clipped error was
        strictly larger, as a detached 0-dim tensor.
    """
    unclipped_error = (vpreds - returns).square()
    if cliprange_value is None:
        token_loss, clipped = 0.5 * unclipped_error, torch.zeros_like(unclipped_error, dtype=torch.bool)
    else:
        vpreds_clipped = values + torch.clamp(vpreds - values, -cliprange_value, cliprange_value)
        clipped_error = (vpreds_clipped - returns).square()
        token_loss = 0.5 * torch.maximum(unclipped_error, clipped_error)
        clipped = clipped_error > unclipped_error
    loss = agg_loss(token_loss, response_mask, loss_agg_mode, **agg_kwargs)
    return loss, {"vf_clipfrac": masked_mean(clipped.to(token_loss.dtype), response_mask).detach()}
