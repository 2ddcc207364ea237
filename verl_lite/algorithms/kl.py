"""KL divergence between the policy and a reference policy: per-token estimators and coefficient control.

Per-token estimators of KL(pi || pi_ref) from samples of pi, with d = log pi - log pi_ref
(John Schulman, "Approximating KL Divergence", http://joschu.net/blog/kl-approx.html):

* ``kl`` / ``k1``: d. Unbiased, high variance, can be negative per token.
* ``abs``: |d|.
* ``mse`` / ``k2``: d^2 / 2. Biased, low variance; its gradient is the true KL gradient on-policy.
* ``low_var_kl`` / ``k3``: exp(-d) + d - 1 >= 0. Unbiased and low variance; clamped to [-10, 10]
  (and d to +-20) so one extreme token cannot dominate.
* ``<name>+`` (e.g. ``k3+``): straight-through variant; the forward value of ``<name>`` with the
  gradient of ``k2``, the estimator whose gradient is unbiased when used as a loss.

Two places use these: ``apply_kl_penalty`` folds the KL into token-level rewards (PPO-style), and
actors add ``kl_penalty(...)`` to the loss (GRPO-style, usually ``low_var_kl``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from verl_lite.utils.registry import Registry

from .config import config_get
from .token_stats import masked_mean

__all__ = [
    "KL_CONTROLLERS",
    "KL_PENALTIES",
    "AdaptiveKLController",
    "FixedKLController",
    "apply_kl_penalty",
    "build_kl_controller",
    "kl_penalty",
]

KLPenaltyFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
KL_PENALTIES: Registry[KLPenaltyFn] = Registry("kl_penalty")
# log pi - log pi_ref is clamped to this before exp() in k3; k3 itself to +-_K3_CLAMP.
_LOG_RATIO_CLAMP = 20.0
_K3_CLAMP = 10.0


@KL_PENALTIES.register("kl")
@KL_PENALTIES.register("k1")
def _kl_k1(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    return log_prob - ref_log_prob


@KL_PENALTIES.register("abs")
def _kl_abs(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    return (log_prob - ref_log_prob).abs()


@KL_PENALTIES.register("mse")
@KL_PENALTIES.register("k2")
def _kl_k2(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    return 0.5 * (log_prob - ref_log_prob).square()


@KL_PENALTIES.register("low_var_kl")
@KL_PENALTIES.register("k3")
def _kl_k3(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    neg_d = (ref_log_prob - log_prob).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    return (torch.exp(neg_d) - neg_d - 1.0).clamp(-_K3_CLAMP, _K3_CLAMP)


def kl_penalty(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token KL estimate between the policy and the reference.

    Args:
        log_prob: (batch, response_len) log pi of the sampled tokens.
        ref_log_prob: (batch, response_len) log pi_ref of the same tokens.
        kl_penalty: a registered estimator name (see the module docstring), optionally with a
            trailing ``+`` for the straight-through variant.

    Returns:
        (batch, response_len) per-token KL; masking and aggregation are the caller's job.
    """
    return _estimate_kl(log_prob, ref_log_prob, kl_penalty)


def _estimate_kl(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, name: str) -> torch.Tensor:
    """``kl_penalty`` under a name that callers with a ``kl_penalty`` argument can still reach."""
    if name.endswith("+"):
        value = KL_PENALTIES.get(name[:-1])(log_prob, ref_log_prob)
        k2 = _kl_k2(log_prob, ref_log_prob)
        # Straight-through: the forward value is ``value``, the gradient is k2's.
        return k2 + (value - k2).detach()
    return KL_PENALTIES.get(name)(log_prob, ref_log_prob)


@torch.no_grad()
def apply_kl_penalty(
    token_level_scores: torch.Tensor,
    old_log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    kl_coef: float,
    kl_penalty: str = "kl",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Token-level rewards = scores - kl_coef * KL(pi_old || pi_ref) on every valid token.

    Args:
        token_level_scores: (batch, response_len) rewards from the reward function.
        old_log_prob: (batch, response_len) log-probs of the rollout policy.
        ref_log_prob: (batch, response_len) log-probs of the reference policy.
        response_mask: (batch, response_len).
        kl_coef: the current coefficient, usually ``controller.value``.
        kl_penalty: the per-token estimator name, as in ``kl_penalty``.

    Returns:
        token_level_rewards: (batch, response_len).
        metrics: ``reward_kl`` (mean over sequences of the per-sequence token-mean KL; feed it to
        ``controller.update``) and ``reward_kl_coef``, as 0-dim tensors.
    """
    mask = response_mask.to(token_level_scores.dtype)
    kl = _estimate_kl(old_log_prob, ref_log_prob, kl_penalty)
    kl = torch.where(mask != 0, kl, torch.zeros_like(kl))
    rewards = token_level_scores - kl_coef * kl
    seq_kl = masked_mean(kl, mask, dim=-1)
    current_kl = masked_mean(seq_kl, (mask.sum(-1) > 0).to(seq_kl.dtype))
    return rewards, {"reward_kl": current_kl, "reward_kl_coef": torch.tensor(float(kl_coef))}


KL_CONTROLLERS: Registry[type] = Registry("kl_controller")


@KL_CONTROLLERS.register("fixed")
class FixedKLController:
    """A constant KL coefficient; ``update`` does nothing."""

    def __init__(self, kl_coef: float):
        self.value = float(kl_coef)

    @classmethod
    def from_config(cls, config: Any) -> FixedKLController:
        """Read ``kl_coef`` (default 0.001)."""
        return cls(config_get(config, "kl_coef", 0.001))

    def update(self, current_kl: float | torch.Tensor, n_steps: int) -> None:
        """Nothing to adapt; present so trainers can call every controller the same way."""

    def state_dict(self) -> dict[str, float]:
        """The coefficient, for checkpoints."""
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the coefficient saved by ``state_dict``."""
        self.value = float(state["value"])


@KL_CONTROLLERS.register("adaptive")
class AdaptiveKLController:
    """A KL coefficient steered so the measured KL tracks ``target_kl`` (Ziegler et al., 2019).

    After each batch: error = clip(current_kl / target_kl - 1, -0.2, 0.2) and
    value *= 1 + error * n_steps / horizon. Paper: https://arxiv.org/abs/1909.08593
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int):
        if target_kl <= 0 or horizon <= 0:
            raise ValueError(f"target_kl={target_kl} and horizon={horizon} must both be > 0.")
        self.value = float(init_kl_coef)
        self.target_kl = float(target_kl)
        self.horizon = int(horizon)

    @classmethod
    def from_config(cls, config: Any) -> AdaptiveKLController:
        """Read ``kl_coef`` (initial value, default 0.001), ``target_kl`` (0.1), ``horizon`` (10000)."""
        return cls(
            config_get(config, "kl_coef", 0.001),
            config_get(config, "target_kl", 0.1),
            config_get(config, "horizon", 10000),
        )

    def update(self, current_kl: float | torch.Tensor, n_steps: int) -> None:
        """Move the coefficient towards the target after a batch of ``n_steps`` samples."""
        error = min(max(float(current_kl) / self.target_kl - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> dict[str, float]:
        """Coefficient and settings, for checkpoints."""
        return {"value": self.value, "target_kl": self.target_kl, "horizon": self.horizon}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` saved; settings absent from ``state`` are kept."""
        self.value = float(state["value"])
        self.target_kl = float(state.get("target_kl", self.target_kl))
        self.horizon = int(state.get("horizon", self.horizon))


def build_kl_controller(config: Any = None) -> FixedKLController | AdaptiveKLController:
    """Create the controller registered under ``config.type`` (default ``"fixed"``) from ``config``."""
    return KL_CONTROLLERS.get(config_get(config, "type", "fixed")).from_config(config)
