"""Post-process a final score: scale it, then clip it (``reward.processors``)."""

from __future__ import annotations

from collections.abc import Callable

from .config import RewardProcessorsConfig

__all__ = ["RewardProcessor", "build_reward_processor", "clip_reward", "scale_reward"]

# score -> processed score
RewardProcessor = Callable[[float], float]


def scale_reward(factor: float) -> RewardProcessor:
    """A processor multiplying the score by ``factor``."""
    return lambda score: score * factor


def clip_reward(low: float | None = None, high: float | None = None) -> RewardProcessor:
    """A processor clamping the score to ``[low, high]``; a None bound is open."""

    def clip(score: float) -> float:
        if low is not None:
            score = max(score, low)
        if high is not None:
            score = min(score, high)
        return score

    return clip


def build_reward_processor(config: RewardProcessorsConfig) -> RewardProcessor:
    """``clip(score * scale, clip_min, clip_max)`` as one function (the identity with the defaults)."""
    scale = scale_reward(config.scale)
    clip = clip_reward(config.clip_min, config.clip_max)
    return lambda score: float(clip(scale(score)))
