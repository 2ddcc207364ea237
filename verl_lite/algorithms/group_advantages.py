"""Group-relative (outcome) advantage estimators: each response is scored against its siblings.

Rows with equal ``index`` (the prompt uid, given as strings or ints) form a group. The score of a
row is the sum of its ``token_level_rewards`` over ``response_mask``; the estimator turns the
scores of a group into one advantage per row, which is then broadcast to the row's valid tokens.
``returns`` equal ``advantages`` (there is no critic).

A group of one has no baseline: it keeps its raw score (mean 0, std 1) in every estimator here.
Hyperparameters come from ``config`` (any mapping or attribute object):

* ``norm_adv_by_std_in_grpo`` (default True): divide by the group std (grpo, grpo_passk, gpg);
  False gives Dr. GRPO (https://arxiv.org/abs/2503.20783).
* ``epsilon`` (default 1e-6): added to the std before dividing.

Group statistics are computed in float64, and a group whose scores are all equal gets exactly
zero advantage (no rounding residue divided by a tiny std).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from .advantages import EstimatorNeeds, register_adv_est
from .config import config_get
from .token_stats import masked_whiten

# Every estimator here compares the samples of one prompt; most need only each sample's score.
GROUP = EstimatorNeeds(groups=True)
OUTCOME = EstimatorNeeds(groups=True, sequence_level=True)

__all__ = ["compute_grpo_outcome_advantage", "group_ids", "sequence_scores"]


class _GroupStats(NamedTuple):
    """Statistics of each row's group, one entry per row, (batch,) float64."""

    mean: torch.Tensor  # 0 for a group of one
    std: torch.Tensor  # unbiased; 1 for a group of one
    size: torch.Tensor  # rows in the group
    total: torch.Tensor  # sum of the group's scores
    span: torch.Tensor  # max - min of the group's scores


def group_ids(index: Any, batch_size: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Map uids (list / numpy array / tensor of str or int) to dense group ids, in first-seen order.

    Returns:
        (batch,) int64 tensor; rows with equal uids share an id.
    """
    if index is None:
        raise ValueError("group-relative estimators need index=(batch,) uids that name each row's prompt.")
    if isinstance(index, (torch.Tensor, np.ndarray)):
        index = index.tolist()
    index = list(index)
    if len(index) != batch_size:
        raise ValueError(f"index has {len(index)} entries but the batch has {batch_size} rows.")
    dense: dict[Any, int] = {}
    # 0-dim tensors hash by identity, so scalars are unwrapped before grouping by equality.
    uids = [uid.item() if isinstance(uid, (torch.Tensor, np.generic)) else uid for uid in index]
    ids = [dense.setdefault(uid, len(dense)) for uid in uids]
    return torch.tensor(ids, dtype=torch.long, device=device)


def sequence_scores(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Sum of ``token_level_rewards`` over ``response_mask`` per row: (batch, response_len) -> (batch,) float64."""
    rewards = token_level_rewards.to(torch.float64)
    return torch.where(response_mask != 0, rewards, torch.zeros_like(rewards)).sum(-1)


def _group_sum(values: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """For each row, the sum of ``values`` over the row's group: (batch,) -> (batch,)."""
    num_groups = int(ids.max().item()) + 1 if ids.numel() else 0
    totals = torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add(0, ids, values)
    return totals[ids]


def _group_stats(scores: torch.Tensor, ids: torch.Tensor) -> _GroupStats:
    """Per-row statistics of the row's group; ``scores`` (batch,) float64, ``ids`` (batch,)."""
    num_groups = int(ids.max().item()) + 1 if ids.numel() else 0
    size = _group_sum(torch.ones_like(scores), ids)
    total = _group_sum(scores, ids)
    empty = torch.zeros(num_groups, dtype=scores.dtype, device=scores.device)
    high = empty.scatter_reduce(0, ids, scores, "amax", include_self=False)[ids]
    low = empty.scatter_reduce(0, ids, scores, "amin", include_self=False)[ids]
    # All-equal groups get their common value as the mean, so their advantages are exactly 0.
    mean = torch.where(high == low, high, total / size)
    std = torch.sqrt(_group_sum((scores - mean) ** 2, ids) / (size - 1).clamp(min=1))
    single = size == 1
    return _GroupStats(
        mean=torch.where(single, torch.zeros_like(scores), mean),
        std=torch.where(single, torch.ones_like(scores), std),
        size=size,
        total=total,
        span=high - low,
    )


def _to_tokens(seq_adv: torch.Tensor, token_level_rewards: torch.Tensor, response_mask: torch.Tensor):
    """Broadcast (batch,) advantages to (batch, response_len), zero outside the mask, rewards' dtype."""
    tokens = seq_adv.to(token_level_rewards.dtype).unsqueeze(-1).expand_as(token_level_rewards)
    return torch.where(response_mask != 0, tokens, torch.zeros_like(token_level_rewards))


def _std_divisor(stats: _GroupStats, epsilon: float, normalize: bool) -> torch.Tensor:
    """std + epsilon for real groups; exactly 1 for singletons or when normalisation is off."""
    if not normalize:
        return torch.ones_like(stats.std)
    return torch.where(stats.size > 1, stats.std + epsilon, torch.ones_like(stats.std))


@torch.no_grad()
def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO: A_i = (s_i - mean_g) / (std_g + epsilon), or s_i - mean_g for Dr. GRPO.

    Paper: https://arxiv.org/abs/2402.03300 (DeepSeekMath).

    Args:
        token_level_rewards: (batch, response_len).
        response_mask: (batch, response_len).
        index: (batch,) uids; equal uids form a group. std_g is the unbiased group std.
        epsilon: added to std_g.
        norm_adv_by_std_in_grpo: False drops the division (Dr. GRPO).

    Returns:
        advantages, returns: (batch, response_len), equal, zero outside ``response_mask``.
    """
    scores = sequence_scores(token_level_rewards, response_mask)
    stats = _group_stats(scores, group_ids(index, scores.shape[0], scores.device))
    seq_adv = (scores - stats.mean) / _std_divisor(stats, epsilon, norm_adv_by_std_in_grpo)
    advantages = _to_tokens(seq_adv, token_level_rewards, response_mask)
    return advantages, advantages


@register_adv_est("grpo", needs=OUTCOME)
def compute_grpo_advantages(
    *, token_level_rewards, response_mask, index=None, values=None, gamma=1.0, lam=1.0, config=None, **extras
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO / Dr. GRPO; reads ``epsilon`` and ``norm_adv_by_std_in_grpo`` from ``config``."""
    return compute_grpo_outcome_advantage(
        token_level_rewards,
        response_mask,
        index,
        epsilon=config_get(config, "epsilon", 1e-6),
        norm_adv_by_std_in_grpo=config_get(config, "norm_adv_by_std_in_grpo", True),
    )


@register_adv_est("rloo", needs=OUTCOME)
@torch.no_grad()
def compute_rloo_advantages(
    *, token_level_rewards, response_mask, index=None, values=None, gamma=1.0, lam=1.0, config=None, **extras
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO: A_i = s_i - mean of the other scores in the group, (total_g - s_i) / (n_g - 1).

    Paper: https://arxiv.org/abs/2402.14740. A lone sample keeps its raw score.
    """
    scores = sequence_scores(token_level_rewards, response_mask)
    stats = _group_stats(scores, group_ids(index, scores.shape[0], scores.device))
    others_mean = (stats.total - scores) / (stats.size - 1).clamp(min=1)
    seq_adv = torch.where(stats.size > 1, scores - others_mean, scores)
    advantages = _to_tokens(seq_adv, token_level_rewards, response_mask)
    return advantages, advantages


@register_adv_est("reinforce_plus_plus_baseline", needs=GROUP)
@torch.no_grad()
def compute_reinforce_plus_plus_baseline_advantages(
    *, token_level_rewards, response_mask, index=None, values=None, gamma=1.0, lam=1.0, config=None, **extras
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++-baseline: subtract the group mean, then whiten over every valid token of the batch.

    Paper: https://arxiv.org/abs/2501.03262. Normalising by batch (not group) statistics avoids
    GRPO's blow-up on groups whose scores nearly agree.
    """
    scores = sequence_scores(token_level_rewards, response_mask)
    stats = _group_stats(scores, group_ids(index, scores.shape[0], scores.device))
    centered = _to_tokens(scores - stats.mean, token_level_rewards, response_mask)
    advantages = masked_whiten(centered, response_mask.to(centered.dtype))
    return advantages, advantages


@register_adv_est("opo", needs=GROUP)
@torch.no_grad()
def compute_opo_advantages(
    *, token_level_rewards, response_mask, index=None, values=None, gamma=1.0, lam=1.0, config=None, **extras
) -> tuple[torch.Tensor, torch.Tensor]:
    """OPO: baseline = length-weighted mean score of the group, b_g = sum(l_i s_i) / sum(l_i).

    l_i is the number of valid tokens of row i; this is the variance-optimal baseline under the
    paper's assumptions ("On-Policy RL with Optimal Reward Baseline", Hao et al., 2025).
    A lone sample (or a group without valid tokens) has baseline 0.
    """
    scores = sequence_scores(token_level_rewards, response_mask)
    ids = group_ids(index, scores.shape[0], scores.device)
    lengths = (response_mask != 0).sum(-1).to(scores.dtype)
    stats = _group_stats(scores, ids)
    weighted = _group_sum(scores * lengths, ids)
    length_total = _group_sum(lengths, ids)
    baseline = torch.where(
        (stats.size > 1) & (length_total > 0), weighted / length_total.clamp(min=1), torch.zeros_like(scores)
    )
    advantages = _to_tokens(scores - baseline, token_level_rewards, response_mask)
    return advantages, advantages


@register_adv_est("grpo_passk", needs=OUTCOME)
@torch.no_grad()
def compute_grpo_passk_advantages(
    *, token_level_rewards, response_mask, index=None, values=None, gamma=1.0, lam=1.0, config=None, **extras
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k GRPO: only the best response of a group is credited, with (best - second best) / std.

    Optimises the chance that at least one of k samples is right ("Pass@k Training", Chen et al.,
    2025). Ties go to the first row; the other rows get 0. A lone sample keeps its raw score.
    Reads ``epsilon`` and ``norm_adv_by_std_in_grpo`` from ``config``.
    """
    scores = sequence_scores(token_level_rewards, response_mask)
    ids = group_ids(index, scores.shape[0], scores.device)
    stats = _group_stats(scores, ids)
    num_groups = int(ids.max().item()) + 1 if ids.numel() else 0
    rows = torch.arange(scores.shape[0], device=scores.device)
    high = torch.full((num_groups,), -torch.inf, dtype=scores.dtype, device=scores.device)
    high = high.scatter_reduce(0, ids, scores, "amax")
    # The first row reaching the group maximum is the winner.
    candidate = torch.where(scores == high[ids], rows, torch.full_like(rows, scores.shape[0]))
    no_row = torch.full((num_groups,), scores.shape[0], device=scores.device)
    winner = no_row.scatter_reduce(0, ids, candidate, "amin")
    is_winner = rows == winner[ids]
    runner_up = torch.full_like(high, -torch.inf).scatter_reduce(
        0, ids, torch.where(is_winner, torch.full_like(scores, -torch.inf), scores), "amax"
    )
    divisor = _std_divisor(
        stats, config_get(config, "epsilon", 1e-6), config_get(config, "norm_adv_by_std_in_grpo", True)
    )
    margin = torch.where(is_winner & (stats.size > 1), scores - runner_up[ids], torch.zeros_like(scores))
    seq_adv = torch.where(stats.size > 1, margin / divisor, scores)
    advantages = _to_tokens(seq_adv, token_level_rewards, response_mask)
    return advantages, advantages


@register_adv_est("gpg", needs=OUTCOME)
@torch.no_grad()
def compute_gpg_advantages(
    *, token_level_rewards, response_mask, index=None, values=None, gamma=1.0, lam=1.0, config=None, **extras
) -> tuple[torch.Tensor, torch.Tensor]:
    """GPG: group-centred score rescaled by alpha = batch / (batch - rows in all-equal groups).

    Groups whose scores all agree give no gradient; alpha rescales the rest so the batch-mean
    gradient keeps its size ("GPG: A Simple and Strong RL Baseline", Chu et al., 2025). Dividing by
    the group std follows ``norm_adv_by_std_in_grpo``; ``epsilon`` is added to it.
    """
    scores = sequence_scores(token_level_rewards, response_mask)
    stats = _group_stats(scores, group_ids(index, scores.shape[0], scores.device))
    degenerate = (stats.size > 1) & (stats.span == 0)
    alpha = scores.shape[0] / max(scores.shape[0] - int(degenerate.sum().item()), 1)
    divisor = _std_divisor(
        stats, config_get(config, "epsilon", 1e-6), config_get(config, "norm_adv_by_std_in_grpo", True)
    )
    seq_adv = alpha * (scores - stats.mean) / divisor
    advantages = _to_tokens(seq_adv, token_level_rewards, response_mask)
    return advantages, advantages
