"""Off-policy correction of the actor loss for trajectories the rollout sampled under another policy.

The rollout (another engine, other numerics, or weights one or more versions old) samples from
pi_rollout; the PPO loss is anchored at pi_old, the actor's log-probs before the update. Two
corrections, combinable, following verl's "rollout correction" (https://richardli.xyz/rl-collapse):

* importance sampling (``rollout_is``): every token's policy loss is multiplied by the detached,
  truncated weight w = min(rho, rollout_is_threshold), with rho = pi_old / pi_rollout taken per token
  (``token``: truncated IS, TIS, https://fengyao.notion.site/off-policy-rl), or once per trajectory as
  the product (``sequence``) or the geometric mean (``geometric``) of its token ratios.
* rejection (``rollout_rs``): tokens (``token``) or whole trajectories (``sequence``, ``geometric``)
  whose ratio leaves [rollout_rs_threshold_lower, rollout_rs_threshold] are masked out of the loss
  and out of its normalising counts.

Ratios are formed in float64 from log-ratios clamped to +-20 nats, and only over tokens the rollout
sampled (``response_mask`` 1; tool observations are 0 there).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from verl_lite.utils.registry import Registry

from .config import config_get, is_number

__all__ = [
    "RATIO_LEVELS",
    "RolloutCorrection",
    "RolloutCorrectionConfig",
    "compute_rollout_correction",
    "rollout_correction_problems",
    "rollout_log_ratio",
]

# |log pi_old - log pi_rollout| (per token, or summed / averaged per trajectory) is clamped to this.
LOG_RATIO_BOUND = 20.0

# name -> fn(token_log_ratio, mask) -> (batch, response_len) log-ratio at that level, both float64.
RATIO_LEVELS: Registry[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = Registry("rollout_ratio_level")


@RATIO_LEVELS.register("token")
def _token_level(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log rho_t = log pi_old(y_t) - log pi_rollout(y_t)."""
    return log_ratio


@RATIO_LEVELS.register("sequence")
def _sequence_level(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log prod_t rho_t = sum_t log rho_t, the same for every token of the trajectory."""
    return (log_ratio * mask).sum(-1, keepdim=True).expand_as(log_ratio)


@RATIO_LEVELS.register("geometric")
def _geometric_level(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log (prod_t rho_t)^(1/T) = mean_t log rho_t over the T sampled tokens."""
    total = (log_ratio * mask).sum(-1, keepdim=True)
    return (total / mask.sum(-1, keepdim=True).clamp(min=1.0)).expand_as(log_ratio)


@dataclass(frozen=True)
class RolloutCorrectionConfig:
    """Which corrections run and their bands: the ``algorithm.rollout_correction`` yaml group (verl's keys)."""

    # Importance-weight level: None (off), "token" (TIS), "sequence" or "geometric".
    rollout_is: str | None = None
    # Truncation cap of the importance weight: w = min(rho, rollout_is_threshold).
    rollout_is_threshold: float = 2.0
    # Rejection level: None (off), "token", "sequence" or "geometric".
    rollout_rs: str | None = None
    # Upper edge of the accepted ratio band; None = rollout_is_threshold.
    rollout_rs_threshold: float | None = None
    # Lower edge of the accepted ratio band; None = 1 / the upper edge.
    rollout_rs_threshold_lower: float | None = None

    def __post_init__(self) -> None:
        problems = rollout_correction_problems(dataclasses.asdict(self), "algorithm.rollout_correction.")
        if problems:
            raise ValueError(" ".join(problems))

    @property
    def enabled(self) -> bool:
        return self.rollout_is is not None or self.rollout_rs is not None

    @property
    def rs_band(self) -> tuple[float, float]:
        """(lower, upper) edges of the ratio band rejection accepts."""
        high = self.rollout_is_threshold if self.rollout_rs_threshold is None else self.rollout_rs_threshold
        low = 1.0 / high if self.rollout_rs_threshold_lower is None else self.rollout_rs_threshold_lower
        return low, high

    @classmethod
    def from_any(cls, config: Any) -> RolloutCorrectionConfig:
        """Build one from None, itself, a mapping or an attribute object (e.g. the whole actor config)."""
        if isinstance(config, cls):
            return config
        values = {f.name: config_get(config, f.name, f.default) for f in dataclasses.fields(cls)}
        return cls(**values)


def rollout_correction_problems(values: Mapping[str, Any], prefix: str = "") -> list[str]:
    """One sentence per invalid ``RolloutCorrectionConfig`` value; ``prefix`` is prepended to key names."""
    out = []
    levels = ", ".join(RATIO_LEVELS.names())
    for name in ("rollout_is", "rollout_rs"):
        value = values.get(name)
        if value is not None and value not in RATIO_LEVELS:
            out.append(f"{prefix}{name}={value!r} is invalid; use null or one of {levels}.")
    threshold = values.get("rollout_is_threshold", 2.0)
    if not is_number(threshold) or threshold <= 0:
        out.append(
            f"{prefix}rollout_is_threshold={threshold!r} is invalid; use a number > 0 (the weight cap)."
        )
    for name in ("rollout_rs_threshold", "rollout_rs_threshold_lower"):
        value = values.get(name)
        if value is not None and (not is_number(value) or value <= 0):
            out.append(f"{prefix}{name}={value!r} is invalid; use null or a ratio > 0.")
    if not out and values.get("rollout_rs") is not None:
        high = values.get("rollout_rs_threshold") or threshold
        low = values.get("rollout_rs_threshold_lower") or 1.0 / high
        if low >= high:
            out.append(
                f"{prefix}rollout_rs_threshold_lower={low} must be < {prefix}rollout_rs_threshold={high} "
                "(the accepted ratio band); widen the band."
            )
    return out


def rollout_log_ratio(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor, level: str
) -> torch.Tensor:
    """log(pi_old / pi_rollout) at ``level``, clamped to +-20 nats, (batch, response_len) float64.

    Args:
        old_log_prob, rollout_log_prob: (batch, response_len) log-probs of the sampled tokens.
        response_mask: (batch, response_len), 1 on tokens the rollout sampled.
        level: a ``RATIO_LEVELS`` name (``token``, ``sequence``, ``geometric``).
    """
    mask = response_mask.double()
    token = (old_log_prob.double() - rollout_log_prob.double()) * mask
    return RATIO_LEVELS.get(level)(token, mask).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)


class RolloutCorrection(NamedTuple):
    """What ``compute_rollout_correction`` returns, all (batch, response_len)."""

    # Detached weight that multiplies each token's policy loss (1 without IS, 0 off the mask).
    weights: torch.Tensor
    # ``response_mask`` with rejected tokens / trajectories set to 0 (the loss and its counts use it).
    response_mask: torch.Tensor
    # True on sampled tokens whose importance weight was truncated (rho > rollout_is_threshold).
    clipped: torch.Tensor


@torch.no_grad()
def compute_rollout_correction(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor, config: Any
) -> RolloutCorrection:
    """Importance weights and rejection mask of a batch against the rollout's log-probs.

    IS: w = min(exp(log rho), rollout_is_threshold) at the ``rollout_is`` level (1 when off).
    RS: keep = [low <= exp(log rho) <= high] at the ``rollout_rs`` level (all kept when off).
    Both use the mask of sampled tokens; ``weights`` is 0 wherever the returned mask is 0.

    Args:
        old_log_prob, rollout_log_prob, response_mask: (batch, response_len).
        config: a ``RolloutCorrectionConfig`` or any config carrying its keys (e.g. the actor's).
    """
    cfg = RolloutCorrectionConfig.from_any(config)
    mask = response_mask.bool()
    weights = torch.ones_like(old_log_prob, dtype=torch.float64)
    clipped = torch.zeros_like(mask)
    if cfg.rollout_is is not None:
        ratio = rollout_log_ratio(old_log_prob, rollout_log_prob, response_mask, cfg.rollout_is).exp()
        clipped = (ratio > cfg.rollout_is_threshold) & mask
        weights = ratio.clamp(max=cfg.rollout_is_threshold)
    if cfg.rollout_rs is not None:
        low, high = cfg.rs_band
        ratio = rollout_log_ratio(old_log_prob, rollout_log_prob, response_mask, cfg.rollout_rs).exp()
        mask = mask & (ratio >= low) & (ratio <= high)
    weights = (weights * mask).to(old_log_prob.dtype)
    return RolloutCorrection(weights, mask.to(response_mask.dtype), clipped)
