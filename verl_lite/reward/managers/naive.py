"""The ``naive`` reward manager: call the per-sample scoring function once per response."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..custom import is_batch_reward_fn
from .base import RewardItem, RewardManager, RewardResult, register_reward_manager, to_reward_result

__all__ = ["NaiveRewardManager"]


@register_reward_manager("naive")
class NaiveRewardManager(RewardManager):
    """Scores each item with ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=, **reward_kwargs)``."""

    def __init__(self, config: Any = None, compute_score: Callable[..., Any] | None = None):
        super().__init__(config, compute_score)
        if is_batch_reward_fn(self.compute_score):
            raise ValueError(
                f"reward function {getattr(self.compute_score, '__name__', self.compute_score)!r} takes "
                f"batch_items (the batch form); set reward.reward_manager=batch to use it."
            )

    def score(self, items: list[RewardItem]) -> list[RewardResult]:
        return [self.score_one(item) for item in items]

    def score_one(self, item: RewardItem) -> RewardResult:
        """The raw result of one item; a raising scorer yields an error result."""
        try:
            value = self.compute_score(
                data_source=item.data_source,
                solution_str=item.response,
                ground_truth=item.ground_truth,
                extra_info=item.extra_info,
                **self.config.reward_kwargs,
            )
            return to_reward_result(value)
        except Exception as exc:
            return self.error_result(exc, item.data_source)
