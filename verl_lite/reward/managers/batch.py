"""The ``batch`` reward manager: call a batch-form reward function once for all responses.

The function receives ``batch_items`` (see :mod:`verl_lite.reward.custom` for the item keys) and
returns one float or dict per item. This suits rewards that compare responses to each other, call a
remote verifier in bulk, or need the full dataset row (the ``batch_items`` convention of comlrl).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..custom import batch_positional_params, is_batch_reward_fn
from .base import RewardItem, RewardManager, RewardResult, register_reward_manager, to_reward_result

__all__ = ["BatchRewardManager", "build_batch_items"]


def build_batch_items(items: list[RewardItem]) -> list[dict[str, Any]]:
    """One dict per item: the row's columns, overridden by the standard keys, plus ``row`` itself."""
    return [
        {
            **item.row,
            "data_source": item.data_source,
            "prompt": item.prompt,
            "completion": item.response,
            "solution_str": item.response,
            "ground_truth": item.ground_truth,
            "extra_info": item.extra_info,
            "response_length": item.response_length,
            "row": item.row,
        }
        for item in items
    ]


@register_reward_manager("batch")
class BatchRewardManager(RewardManager):
    """Scores all items with one call: ``fn(batch_items=..., **reward_kwargs)``.

    If the call raises, or returns a list of the wrong length, every item carries that error; a
    single bad value only fails its own item.
    """

    def __init__(self, config: Any = None, compute_score: Callable[..., Any] | None = None):
        if compute_score is None or not is_batch_reward_fn(compute_score):
            raise ValueError(
                "reward.reward_manager=batch needs a function with a batch_items parameter; set "
                "reward.custom_reward_function.path/name to one (see examples/custom_reward.py)."
            )
        super().__init__(config, compute_score)
        # comlrl style fn(completions, *, batch_items): the one required positional gets the completions
        self._pass_completions = bool(batch_positional_params(compute_score))

    def score(self, items: list[RewardItem]) -> list[RewardResult]:
        if not items:
            return []
        batch_items = build_batch_items(items)
        args = ([item.response for item in items],) if self._pass_completions else ()
        try:
            values = list(self.compute_score(*args, batch_items=batch_items, **self.config.reward_kwargs))
            if len(values) != len(items):
                raise ValueError(
                    f"batch reward function returned {len(values)} scores for {len(items)} items"
                )
        except Exception as exc:
            return [self.error_result(exc, item.data_source) for item in items]
        results = []
        for item, value in zip(items, values):
            try:
                results.append(to_reward_result(value))
            except Exception as exc:
                results.append(self.error_result(exc, item.data_source))
        return results
