"""The ``dapo`` reward manager: the naive score plus DAPO's soft overlong punishment.

DAPO (https://arxiv.org/abs/2503.14476, eq. 13): with budget ``L_max`` (``max_response_length``) and
buffer ``L_cache`` (``overlong_buffer.len``), a response of ``|y|`` tokens gets

    penalty = min(0, -(|y| - (L_max - L_cache)) / L_cache * penalty_factor)

so nothing up to ``L_max - L_cache`` tokens, then linearly down to ``-penalty_factor`` at ``L_max``.
"""

from __future__ import annotations

from .base import RewardItem, RewardResult, register_reward_manager
from .naive import NaiveRewardManager

__all__ = ["DAPORewardManager", "compute_overlong_penalty"]


def compute_overlong_penalty(
    response_length: int, max_response_length: int, buffer_len: int, penalty_factor: float
) -> float:
    """The (non-positive) overlong penalty of one response; see the module docstring."""
    expected_len = max_response_length - buffer_len
    return min(0.0, -(response_length - expected_len) / buffer_len * penalty_factor)


@register_reward_manager("dapo")
class DAPORewardManager(NaiveRewardManager):
    """Per-sample scores; with ``overlong_buffer.enable`` adds the penalty and reports it in ``extra``.

    ``extra`` gains ``overlong_reward`` (the penalty) and ``overlong`` (1.0 if the response reached the
    buffer zone). Items need ``response_length`` and ``max_response_length``.
    """

    def score_one(self, item: RewardItem) -> RewardResult:
        result = super().score_one(item)
        buffer = self.config.overlong_buffer
        if not buffer.enable or result.score is None:
            return result
        if item.max_response_length <= 0:
            raise ValueError(
                "dapo reward manager: RewardItem.max_response_length is unset; the overlong penalty needs "
                "the response budget (data.max_response_length)."
            )
        penalty = compute_overlong_penalty(
            item.response_length, item.max_response_length, buffer.len, buffer.penalty_factor
        )
        result.score += penalty
        result.extra["overlong_reward"] = penalty
        result.extra["overlong"] = float(penalty < 0)
        return result
