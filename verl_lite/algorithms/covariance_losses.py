"""Entropy-preserving policy losses that act on high-covariance tokens (Clip-Cov and KL-Cov).

Both come from "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models"
(https://arxiv.org/abs/2505.22617): policy entropy collapses because of tokens where the
advantage and the log-probability co-vary strongly. The per-token covariance is

    cov_t = (A_t - mean(A)) * (log pi_t - mean(log pi)),

with means over the valid tokens of the micro-batch. ``clip_cov`` detaches the gradient of a
random few such tokens; ``kl_cov`` adds a KL penalty on the top few. Both follow the
``PolicyLossFn`` signature of ``policy_losses.py`` and register into the same table.
"""

from __future__ import annotations

import torch

from .aggregation import agg_loss
from .config import PolicyLossConfig
from .policy_losses import clipped_surrogate, log_ratio_and_ratio, policy_loss_metrics, register_policy_loss
from .token_stats import masked_mean

__all__ = ["token_covariance"]


def token_covariance(
    advantages: torch.Tensor, log_prob: torch.Tensor, response_mask: torch.Tensor
) -> torch.Tensor:
    """Centred product (A - mean A) * (log pi - mean log pi) per token, no gradient.

    Args:
        advantages, log_prob, response_mask: (batch, response_len).

    Returns:
        (batch, response_len); 0 where the mask is 0.
    """
    adv = advantages.detach()
    logp = log_prob.detach()
    cov = (adv - masked_mean(adv, response_mask)) * (logp - masked_mean(logp, response_mask))
    return torch.where(response_mask != 0, cov, torch.zeros_like(cov))


def _selection_size(fraction: float, num_valid: int) -> int:
    """How many tokens a ``fraction`` of ``num_valid`` selects: at least one when both are positive."""
    if fraction <= 0 or num_valid == 0:
        return 0
    return max(int(fraction * num_valid), 1)


@register_policy_loss("clip_cov")
def compute_policy_loss_clip_cov(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, **agg_kwargs
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clip-Cov: the PPO clipped surrogate, with the gradient of a few high-covariance tokens removed.

    Candidates are valid tokens with clip_cov_lb < cov < clip_cov_ub; ``clip_cov_ratio`` of the
    valid tokens (at least one) are drawn at random among them (torch's global RNG) and their loss
    is zeroed. The ratio is clipped to [1 - clip_ratio_low, 1 + clip_ratio_high] as in ``vanilla``.

    Metrics: ``pg_clipfrac`` (ratio clip active), ``pg_clipfrac_lower`` 0, ``pg_cov_clipfrac``
    (fraction of valid tokens whose gradient was removed).
    """
    cfg = PolicyLossConfig.from_any(config)
    log_ratio, ratio = log_ratio_and_ratio(old_log_prob, log_prob, cfg.log_ratio_clamp)
    token_loss, clipped = clipped_surrogate(ratio, advantages, cfg.clip_ratio_low, cfg.clip_ratio_high)
    valid = response_mask != 0
    cov = token_covariance(advantages, log_prob, response_mask)
    in_band = valid & (cov > cfg.clip_cov_lb) & (cov < cfg.clip_cov_ub)
    candidates = torch.nonzero(in_band.flatten()).squeeze(-1)
    num_pick = min(_selection_size(cfg.clip_cov_ratio, int(valid.sum().item())), candidates.numel())
    picked = candidates[torch.randperm(candidates.numel(), device=candidates.device)[:num_pick]]
    keep = torch.ones(valid.numel(), dtype=token_loss.dtype, device=token_loss.device)
    keep[picked] = 0.0
    keep = keep.view_as(token_loss)
    loss = agg_loss(token_loss * keep, response_mask, loss_agg_mode, **agg_kwargs)
    cov_clipfrac = masked_mean(1.0 - keep, response_mask)
    return loss, policy_loss_metrics(response_mask, log_ratio, clipped, pg_cov_clipfrac=cov_clipfrac)


@register_policy_loss("kl_cov")
def compute_policy_loss_kl_cov(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, **agg_kwargs
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """KL-Cov: the unclipped surrogate -A r, plus kl_cov_coef * |log pi - log pi_old| on the top tokens.

    The ``kl_cov_ratio`` fraction of valid tokens (at least one) with the largest covariance get
    the penalty; no ratio clipping is applied anywhere.

    Metrics: clip fractions 0, ``pg_kl_cov_frac`` (fraction of valid tokens penalised).
    """
    cfg = PolicyLossConfig.from_any(config)
    log_ratio, ratio = log_ratio_and_ratio(old_log_prob, log_prob, cfg.log_ratio_clamp)
    token_loss = -advantages * ratio
    valid = response_mask != 0
    cov = token_covariance(advantages, log_prob, response_mask)
    num_pick = _selection_size(cfg.kl_cov_ratio, int(valid.sum().item()))
    ranked = torch.where(valid, cov, torch.full_like(cov, -torch.inf)).flatten()
    picked = torch.topk(ranked, num_pick).indices if num_pick else ranked.new_zeros(0, dtype=torch.long)
    penalised = torch.zeros(valid.numel(), dtype=torch.bool, device=valid.device)
    penalised[picked] = True
    penalised = penalised.view_as(valid)
    token_loss = torch.where(penalised, token_loss + cfg.kl_cov_coef * log_ratio.abs(), token_loss)
    loss = agg_loss(token_loss, response_mask, loss_agg_mode, **agg_kwargs)
    kl_cov_frac = masked_mean(penalised.to(token_loss.dtype), response_mask)
    return loss, policy_loss_metrics(response_mask, log_ratio, pg_kl_cov_frac=kl_cov_frac)
