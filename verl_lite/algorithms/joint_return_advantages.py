"""``joint_return``: CoMLRL's return baselines (its ``advantage_mode``) as one outcome estimator.

Each response's return is its summed ``token_level_rewards`` (the joint reward, minus the reference-KL
penalty when that is on); the samples of one prompt (equal ``index``) form a group of G returns R_g, and
``return_baseline`` in the config picks the baseline:

* ``mean``: A_g = R_g - mean(R)
* ``max``: A_g = R_g - max(R) (ReMax's baseline over the group)
* ``rloo``: A_g = R_g - mean of the other returns = (G R_g - sum(R)) / (G - 1)
* ``raw``: A_g = R_g (REINFORCE without a baseline)

With ``norm_adv_by_std_in_grpo`` (CoMLRL's ``advantage_normalization``, default True) the group's
advantages are then standardised: (A_g - mean(A)) / max(std(A), 1e-6), std over the G values
(population std, as CoMLRL); a group of one keeps its un-normalised advantage.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .advantages import register_adv_est
from .config import config_get
from .group_advantages import OUTCOME, _group_stats, _group_sum, _to_tokens, group_ids, sequence_scores

# baseline of each row from (scores, group stats, dense group ids)
Baseline = Callable[[torch.Tensor, object, torch.Tensor], torch.Tensor]


def _max_baseline(scores: torch.Tensor, stats, ids: torch.Tensor) -> torch.Tensor:
    high = torch.full((int(ids.max()) + 1,), -torch.inf, dtype=scores.dtype, device=scores.device)
    return high.scatter_reduce(0, ids, scores, "amax")[ids]


BASELINES: dict[str, Baseline] = {
    "mean": lambda scores, stats, ids: stats.total / stats.size,
    "max": _max_baseline,
    "rloo": lambda scores, stats, ids: torch.where(
        stats.size > 1, (stats.total - scores) / (stats.size - 1).clamp(min=1), stats.total / stats.size
    ),
    "raw": lambda scores, stats, ids: torch.zeros_like(scores),
}


@torch.no_grad()
def joint_return_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index, mode: str, normalize: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages (= returns) of CoMLRL's ``advantage_mode`` ``mode``, broadcast over the response tokens."""
    if mode not in BASELINES:
        raise ValueError(f"algorithm.return_baseline is {mode!r}; use one of {', '.join(BASELINES)}.")
    scores = sequence_scores(token_level_rewards, response_mask)
    if not scores.numel():
        return token_level_rewards.clone(), token_level_rewards.clone()
    ids = group_ids(index, scores.shape[0], scores.device)
    stats = _group_stats(scores, ids)
    advantages = scores - BASELINES[mode](scores, stats, ids)
    if normalize:
        mean = _group_sum(advantages, ids) / stats.size
        std = torch.sqrt(_group_sum((advantages - mean) ** 2, ids) / stats.size).clamp(min=1e-6)
        advantages = torch.where(stats.size > 1, (advantages - mean) / std, advantages)
    tokens = _to_tokens(advantages, token_level_rewards, response_mask)
    return tokens, tokens


@register_adv_est("joint_return", needs=OUTCOME)
def compute_joint_return_advantages(
    *, token_level_rewards, response_mask, index=None, values=None, gamma=1.0, lam=1.0, config=None, **extras
) -> tuple[torch.Tensor, torch.Tensor]:
    """CoMLRL's advantages; reads ``return_baseline`` and ``norm_adv_by_std_in_grpo`` from ``config``."""
    return joint_return_advantage(
        token_level_rewards,
        response_mask,
        index,
        config_get(config, "return_baseline", "mean"),
        normalize=config_get(config, "norm_adv_by_std_in_grpo", True),
    )
