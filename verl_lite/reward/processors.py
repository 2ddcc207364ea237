"""Post-process a final score: scale it, then clip it (``reward.processors``)."""

from __future__ import annotations

from collections.abc import Callable

from .config import RewardProcessorsConfig

__all__ = ["RewardProcessor", "build_reward_processor"]

# score -> processed score
RewardProcessor = Callable[[float], float]


def build_reward_processor(config: RewardProcessorsConfig) -> RewardProcessor:
    """``clip(score * scale, clip_min, clip_max)`` as one function (a None bound is open)."""

    def process(score: float) -> float:
        score = score * config.scale
        if config.clip_min is not None:
            score = max(score, config.clip_min)
        if config.clip_max is not None:
            score = min(score, config.clip_max)
        return float(score)

    return process
