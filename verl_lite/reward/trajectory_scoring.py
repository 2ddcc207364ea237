"""Scoring finished trajectories: reward items from prompt rows and decoded responses, results as plain dicts.

The agent-loop worker calls this as trajectories finish; what comes back is what a trajectory's tag
and its ``token_level_scores`` are made from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verl_lite.reward.managers.base import RewardItem


@dataclass
class ScoredResponse:
    """The reward of one response as the rollout stores it."""

    score: float
    """The reward (0.0 when scoring raised)."""
    acc: float
    """The scorer's ``acc`` when it returns one, else ``score > 0``."""
    pred: Any = None
    """The answer the scorer extracted, when it reports one (for maj@n)."""
    error: str | None = None
    """``"{ExcType}: {message}"`` when the scorer raised."""
    reward_extra: dict[str, float] | None = None
    """Other numeric fields of the scorer or manager (e.g. DAPO's overlong penalty): step metrics."""


def reward_item(row: dict[str, Any], response_text: str, response_length: int, max_length: int) -> RewardItem:
    """The ``RewardItem`` of one response to the prompt row ``row`` (the prompt key's stored fields)."""
    return RewardItem(
        data_source=row["data_source"],
        prompt=row.get("raw_prompt") or "",
        response=response_text,
        ground_truth=row.get("ground_truth"),
        extra_info=row.get("extra_info") or {},
        response_length=response_length,
        max_response_length=max_length,
        row=row,
    )


def score_items(reward_manager, items: list[RewardItem]) -> list[ScoredResponse]:
    """Run the reward manager on ``items`` (one batch call) and keep what the rollout stores."""
    scored = []
    for result in reward_manager(items):
        extra = result.extra or {}
        score = 0.0 if result.score is None else float(result.score)
        numeric = {
            k: float(v)
            for k, v in extra.items()
            if k != "acc" and isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        scored.append(
            ScoredResponse(
                score=score,
                acc=float(extra.get("acc", score > 0)),
                pred=extra.get("pred"),
                error=result.error,
                reward_extra=numeric,
            )
        )
    return scored


__all__ = ["ScoredResponse", "reward_item", "score_items"]
