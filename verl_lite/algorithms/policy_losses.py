"""Policy-gradient losses for the actor update, and their registry.

Every registered loss has the ``PolicyLossFn`` signature::

    fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None,
       **agg_kwargs) -> (loss, metrics)

* ``old_log_prob``, ``log_prob``, ``advantages``, ``response_mask``: (batch, response_len);
  ``log_prob`` carries the gradient, the others are constants.
* ``config``: a ``PolicyLossConfig``, a mapping or an attribute object (see ``config.py``).
* ``agg_kwargs``: forwarded to ``agg_loss`` (``global_num_tokens``, ``global_num_seqs``,
  ``dp_size``, ``norm_length``) so that micro-batch losses add up to the mini-batch loss, and
  ``loss_weights`` (the off-policy importance weights, see ``rollout_correction.py``), which
  multiply the per-token loss before it is reduced.
* ``loss`` is a 0-dim tensor; ``metrics`` maps ``pg_clipfrac``, ``pg_clipfrac_lower`` and
  ``ppo_kl`` (plus loss-specific extras) to detached 0-dim tensors, local to this micro-batch.

The ratio is always exp(clamp(log pi - log pi_old, +-log_ratio_clamp)), so it stays finite.
The covariance-based losses (``clip_cov``, ``kl_cov``) live in ``covariance_losses.py``.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from verl_lite.utils.registry import Registry

from .aggregation import agg_loss
from .config import PolicyLossConfig
from .token_stats import masked_mean

__all__ = [
    "POLICY_LOSSES",
    "PolicyLossFn",
    "clipped_surrogate",
    "get_policy_loss_fn",
    "log_ratio_and_ratio",
    "policy_loss_metrics",
    "register_policy_loss",
]


class PolicyLossFn(Protocol):
    """Signature of a registered policy loss."""

    def __call__(
        self,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        **agg_kwargs: Any,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...


POLICY_LOSSES: Registry[PolicyLossFn] = Registry("policy_loss")


def register_policy_loss(name: str):
    """Decorator registering a ``PolicyLossFn`` under ``name`` (e.g. ``"vanilla"``)."""
    return POLICY_LOSSES.register(name)


def get_policy_loss_fn(name: str) -> PolicyLossFn:
    """The policy loss registered under ``name``; the ``KeyError`` lists the known names."""
    return POLICY_LOSSES.get(name)


def log_ratio_and_ratio(
    old_log_prob: torch.Tensor, log_prob: torch.Tensor, clamp: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clamped log pi - log pi_old and its exp, both (batch, response_len)."""
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-clamp, max=clamp)
    return log_ratio, torch.exp(log_ratio)


def clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, low: float, high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's pessimistic surrogate max(-A r, -A clip(r, 1 - low, 1 + high)), per token.

    Returns:
        loss: (batch, response_len).
        clipped: (batch, response_len) bool, True where the clipped branch was strictly larger.
    """
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - low, 1.0 + high)
    return torch.maximum(unclipped, clipped), clipped > unclipped


def policy_loss_metrics(
    mask: torch.Tensor,
    log_ratio: torch.Tensor,
    clipfrac: torch.Tensor | None = None,
    clipfrac_lower: torch.Tensor | None = None,
    **extra: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """The metric dict every policy loss returns, as detached 0-dim tensors.

    Args:
        mask: (batch, response_len) response mask.
        log_ratio: (batch, response_len) log pi - log pi_old; ``ppo_kl`` = mean(-log_ratio), an
            estimate of KL(pi_old || pi).
        clipfrac, clipfrac_lower: (batch, response_len) bool, where the upper / lower (or dual)
            clip was active; None reports 0.
        extra: further loss-specific 0-dim metrics.
    """
    zero = torch.zeros((), device=log_ratio.device)
    metrics = {
        "pg_clipfrac": zero if clipfrac is None else masked_mean(clipfrac.float(), mask),
        "pg_clipfrac_lower": zero if clipfrac_lower is None else masked_mean(clipfrac_lower.float(), mask),
        "ppo_kl": masked_mean(-log_ratio, mask),
    }
    metrics.update(extra)
    return {key: value.detach() for key, value in metrics.items()}


@register_policy_loss("vanilla")
def compute_policy_loss_vanilla(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, **agg_kwargs
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Dual-clip PPO with asymmetric ("clip-higher") ratio bounds.

    L = max(-A r, -A clip(r, 1 - clip_ratio_low, 1 + clip_ratio_high)); for A < 0 the result is
    further capped at -A * clip_ratio_c, so a huge ratio on a bad token cannot dominate.
    Papers: https://arxiv.org/abs/1707.06347 (PPO), https://arxiv.org/abs/1912.09729 (dual clip),
    https://arxiv.org/abs/2503.14476 (DAPO clip-higher).

    Metrics: ``pg_clipfrac`` (ratio clip active), ``pg_clipfrac_lower`` (dual clip active).
    """
    cfg = PolicyLossConfig.from_any(config)
    log_ratio, ratio = log_ratio_and_ratio(old_log_prob, log_prob, cfg.log_ratio_clamp)
    clip_loss, clipped = clipped_surrogate(ratio, advantages, cfg.clip_ratio_low, cfg.clip_ratio_high)
    dual_bound = -advantages * cfg.clip_ratio_c
    dual_clipped = (advantages < 0) & (clip_loss > dual_bound)
    token_loss = torch.where(dual_clipped, dual_bound, clip_loss)
    loss = agg_loss(token_loss, response_mask, loss_agg_mode, **agg_kwargs)
    return loss, policy_loss_metrics(response_mask, log_ratio, clipped, dual_clipped)


@register_policy_loss("gspo")
def compute_policy_loss_gspo(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, **agg_kwargs
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO: clip a sequence-level ratio, the geometric mean of the token ratios of the response.

    s_i = exp(mean_t log(pi / pi_old)); each token uses s_i's value with its own gradient,
    r_it = sg(s_i) * pi_it / sg(pi_it), inside the usual clipped surrogate. Use tiny clip ranges
    (the paper uses clip_ratio_low=3e-4, clip_ratio_high=4e-4) and ``seq-mean-token-mean``.
    Paper: https://arxiv.org/abs/2507.18071
    """
    cfg = PolicyLossConfig.from_any(config)
    token_log_ratio = log_prob - old_log_prob
    seq_log_ratio = masked_mean(token_log_ratio, response_mask, dim=-1)
    seq_log_ratio = seq_log_ratio.clamp(-cfg.log_ratio_clamp, cfg.log_ratio_clamp).unsqueeze(-1)
    log_ratio = seq_log_ratio.detach() + log_prob - log_prob.detach()
    ratio = torch.exp(log_ratio)
    token_loss, clipped = clipped_surrogate(ratio, advantages, cfg.clip_ratio_low, cfg.clip_ratio_high)
    loss = agg_loss(token_loss, response_mask, loss_agg_mode, **agg_kwargs)
    kl_log_ratio = token_log_ratio.clamp(-cfg.log_ratio_clamp, cfg.log_ratio_clamp)
    return loss, policy_loss_metrics(response_mask, kl_log_ratio, clipped)


@register_policy_loss("sapo")
def compute_policy_loss_sapo(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, **agg_kwargs
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """SAPO: a smooth gate instead of a hard clip, L = -A * (4 / tau) * sigmoid(tau * (r - 1)).

    The gradient is -A * 4 sigma (1 - sigma) * grad r: equal to PPO's at r = 1 and decaying
    smoothly as r leaves 1, with a faster decay (tau = ``sapo_tau_neg``) for negative advantages
    than for positive ones (``sapo_tau_pos``). Soft Adaptive Policy Optimization (Qwen, 2025).
    There is no hard clip, so the clip fractions are 0.
    """
    cfg = PolicyLossConfig.from_any(config)
    log_ratio, ratio = log_ratio_and_ratio(old_log_prob, log_prob, cfg.log_ratio_clamp)
    tau = torch.where(advantages > 0, cfg.sapo_tau_pos, cfg.sapo_tau_neg).to(ratio.dtype)
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    loss = agg_loss(-advantages * gate, response_mask, loss_agg_mode, **agg_kwargs)
    return loss, policy_loss_metrics(response_mask, log_ratio)


@register_policy_loss("cispo")
def compute_policy_loss_cispo(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, **agg_kwargs
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CISPO: REINFORCE weighted by a truncated, stop-gradient importance ratio.

    L = -sg(clip(r, 1 - cispo_clip_ratio_low, 1 + cispo_clip_ratio_high)) * A * log pi. Unlike
    PPO no token loses its gradient; only the weight is bounded. Paper (MiniMax-M1):
    https://arxiv.org/abs/2506.13585

    Metrics: ``pg_clipfrac`` (weight truncated above), ``pg_clipfrac_lower`` (truncated below).
    """
    cfg = PolicyLossConfig.from_any(config)
    log_ratio, ratio = log_ratio_and_ratio(old_log_prob, log_prob, cfg.log_ratio_clamp)
    low, high = 1.0 - cfg.cispo_clip_ratio_low, 1.0 + cfg.cispo_clip_ratio_high
    weight = torch.clamp(ratio, low, high).detach()
    loss = agg_loss(-weight * advantages * log_prob, response_mask, loss_agg_mode, **agg_kwargs)
    return loss, policy_loss_metrics(response_mask, log_ratio, ratio > high, ratio < low)


@register_policy_loss("reinforce")
@register_policy_loss("gpg")
def compute_policy_loss_reinforce(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, **agg_kwargs
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Plain on-policy policy gradient, L = -A * log pi, with no ratio and no clipping.

    Registered as ``reinforce`` and as ``gpg``: GPG's loss is exactly this; what makes GPG is its
    advantage estimator (the ``gpg`` estimator). Suited to strictly on-policy updates (one
    optimizer step per rollout), where the PPO ratio would be 1 anyway.
    """
    cfg = PolicyLossConfig.from_any(config)
    log_ratio, _ = log_ratio_and_ratio(old_log_prob, log_prob, cfg.log_ratio_clamp)
    loss = agg_loss(-advantages * log_prob, response_mask, loss_agg_mode, **agg_kwargs)
    return loss, policy_loss_metrics(response_mask, log_ratio)
