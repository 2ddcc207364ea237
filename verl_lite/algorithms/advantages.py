"""Advantage estimators that work along the tokens of each response, and their registry.

Every registered estimator has the ``AdvantageEstimatorFn`` signature: keyword arguments
``token_level_rewards``, ``response_mask``, ``index``, ``values``, ``gamma``, ``lam``, ``config``
(plus extras such as ``reward_baselines`` that only some estimators read; the rest ignore them),
and returns ``(advantages, returns)``, both (batch, response_len) and zero where the mask is 0.

Multi-turn responses: positions where ``response_mask`` is 0 *inside* a response (tool output,
observations) are not time steps. The recursions below skip them and carry the running value,
advantage or return across them, so their values and rewards never influence the result.

This module holds the token-level estimators (``gae``, ``reinforce_plus_plus``, ``remax``);
the group-relative ones live in ``group_advantages.py`` and register into the same table.

What an estimator needs from the rest of the step besides rewards and the mask is a fact of its
registry entry (``EstimatorNeeds``, read with ``get_adv_estimator_needs``), so the trainer and the
workers ask the entry instead of switching on estimator names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from verl_lite.utils.registry import Registry

from .token_stats import masked_whiten

__all__ = [
    "ADV_ESTIMATORS",
    "ESTIMATOR_NEEDS_ATTR",
    "AdvantageEstimatorFn",
    "EstimatorNeeds",
    "compute_discounted_returns",
    "compute_gae_advantage_return",
    "get_adv_estimator_fn",
    "get_adv_estimator_needs",
    "register_adv_est",
]


class AdvantageEstimatorFn(Protocol):
    """Signature of a registered advantage estimator (all arguments are keywords)."""

    def __call__(
        self,
        *,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Any = None,
        values: torch.Tensor | None = None,
        gamma: float = 1.0,
        lam: float = 1.0,
        config: Any = None,
        **extras: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


ADV_ESTIMATORS: Registry[AdvantageEstimatorFn] = Registry("advantage_estimator")


# Attribute under which ``register_adv_est`` attaches an estimator's ``EstimatorNeeds``.
ESTIMATOR_NEEDS_ATTR = "adv_estimator_needs"


@dataclass(frozen=True)
class EstimatorNeeds:
    """Inputs an estimator needs that the step must produce for it, besides rewards and the mask."""

    # values=(batch, response_len) from a critic: the trainer runs the critic role for the estimator.
    values: bool = False
    # Compares the samples of one prompt (its group, by ``index``): needs rollout.n >= 2.
    groups: bool = False
    # reward_baselines=(batch,): the reward-manager score of one greedy (temperature 0) response to
    # each row's prompt; the rollout then decodes and scores that response too (ReMax).
    greedy_baseline: bool = False
    # One advantage per response, from its score and its group's scores alone (not its length or tokens):
    # the controller computes it from the trajectories' tags, with no worker call.
    sequence_level: bool = False


def register_adv_est(name: str, needs: EstimatorNeeds | None = None):
    """Decorator registering an ``AdvantageEstimatorFn`` under ``name`` (e.g. ``"grpo"``).

    ``needs`` says what the step must produce for the estimator (nothing extra by default); it is
    attached to the function as ``ESTIMATOR_NEEDS_ATTR``.
    """

    def decorator(fn: AdvantageEstimatorFn) -> AdvantageEstimatorFn:
        if needs is not None:
            setattr(fn, ESTIMATOR_NEEDS_ATTR, needs)
        return ADV_ESTIMATORS.register(name)(fn)

    return decorator


def get_adv_estimator_fn(name: str) -> AdvantageEstimatorFn:
    """The estimator registered under ``name``; the ``KeyError`` lists the known names."""
    return ADV_ESTIMATORS.get(name)


def get_adv_estimator_needs(name: str) -> EstimatorNeeds:
    """The ``EstimatorNeeds`` of the estimator registered under ``name`` (none extra if it declared none)."""
    return getattr(get_adv_estimator_fn(name), ESTIMATOR_NEEDS_ATTR, EstimatorNeeds())


@torch.no_grad()
def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized Advantage Estimation, TD(lambda) over the valid tokens of each response.

    delta_t = r_t + gamma * V_next - V_t and A_t = delta_t + gamma * lam * A_next, where "next"
    is the next position with ``response_mask`` = 1 (V_next = A_next = 0 after the last one).
    Masked positions are skipped: their values and rewards are never read.
    Paper: https://arxiv.org/abs/1506.02438

    Args:
        token_level_rewards: (batch, response_len).
        values: (batch, response_len) critic values V(s_t).
        response_mask: (batch, response_len), 1 on tokens the policy generated.
        gamma: discount per valid token.
        lam: GAE lambda.

    Returns:
        advantages: (batch, response_len), whitened over the mask.
        returns: (batch, response_len), A_t + V_t before whitening (the critic's target).
        Both are zero where ``response_mask`` is 0.
    """
    mask = response_mask.to(values.dtype)
    valid = mask != 0
    next_value = torch.zeros_like(values[:, 0])
    next_adv = torch.zeros_like(values[:, 0])
    advantages = torch.zeros_like(values)
    for t in reversed(range(values.shape[1])):
        delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
        adv_t = delta + gamma * lam * next_adv
        # Masked positions keep the carried values, so they are invisible to earlier tokens.
        next_adv = torch.where(valid[:, t], adv_t, next_adv)
        next_value = torch.where(valid[:, t], values[:, t], next_value)
        advantages[:, t] = torch.where(valid[:, t], adv_t, torch.zeros_like(adv_t))
    returns = torch.where(valid, advantages + values, torch.zeros_like(values))
    return masked_whiten(advantages, mask), returns


@torch.no_grad()
def compute_discounted_returns(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float = 1.0
) -> torch.Tensor:
    """Discounted reward-to-go G_t = r_t + gamma * G_next over the valid tokens of each row.

    Args:
        token_level_rewards: (batch, response_len).
        response_mask: (batch, response_len); masked positions carry G through undiscounted.
        gamma: discount per valid token.

    Returns:
        (batch, response_len) returns, zero where ``response_mask`` is 0.
    """
    valid = response_mask != 0
    running = torch.zeros_like(token_level_rewards[:, 0])
    returns = torch.zeros_like(token_level_rewards)
    for t in reversed(range(token_level_rewards.shape[1])):
        running = torch.where(valid[:, t], token_level_rewards[:, t] + gamma * running, running)
        returns[:, t] = torch.where(valid[:, t], running, torch.zeros_like(running))
    return returns


@register_adv_est("gae", needs=EstimatorNeeds(values=True))
def compute_gae_advantages(
    *, token_level_rewards, response_mask, index=None, values=None, gamma=1.0, lam=1.0, config=None, **extras
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's estimator: GAE with a critic (see ``compute_gae_advantage_return``); needs ``values``."""
    if values is None:
        raise ValueError("advantage estimator 'gae' needs values=(batch, response_len) from a critic.")
    return compute_gae_advantage_return(token_level_rewards, values, response_mask, gamma, lam)


@register_adv_est("reinforce_plus_plus")
@torch.no_grad()
def compute_reinforce_plus_plus_advantages(
    *, token_level_rewards, response_mask, index=None, values=None, gamma=1.0, lam=1.0, config=None, **extras
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted reward-to-go, whitened over every valid token of the batch.

    A_t = whiten(G_t) with G_t from ``compute_discounted_returns``; returns are G_t.
    Paper: https://arxiv.org/abs/2501.03262

    Returns:
        advantages, returns: (batch, response_len), zero outside ``response_mask``.
    """
    returns = compute_discounted_returns(token_level_rewards, response_mask, gamma)
    return masked_whiten(returns, response_mask.to(returns.dtype)), returns


@register_adv_est("remax", needs=EstimatorNeeds(greedy_baseline=True))
@torch.no_grad()
def compute_remax_advantages(
    *, token_level_rewards, response_mask, index=None, values=None, gamma=1.0, lam=1.0, config=None, **extras
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax: reward-to-go minus the reward of the greedy response to the same prompt.

    A_t = G_t - b, with b = ``reward_baselines`` (batch,), the score of a greedy decode of the row's
    prompt; the rollout generates and scores it alongside the samples because the registry entry
    declares ``EstimatorNeeds(greedy_baseline=True)``. The baseline is the plain score (no KL
    penalty); with ``use_kl_in_reward`` the KL terms stay in G_t. Returns are G_t.
    Paper: https://arxiv.org/abs/2310.10505

    Extras:
        reward_baselines: (batch,) required.

    Returns:
        advantages, returns: (batch, response_len), zero outside ``response_mask``.
    """
    baselines = extras.get("reward_baselines")
    if baselines is None:
        raise ValueError("advantage estimator 'remax' needs reward_baselines=(batch,) from greedy rollouts.")
    returns = compute_discounted_returns(token_level_rewards, response_mask, gamma)
    baselines = torch.as_tensor(baselines, dtype=returns.dtype, device=returns.device).reshape(-1, 1)
    advantages = torch.where(response_mask != 0, returns - baselines, torch.zeros_like(returns))
    return advantages, returns
