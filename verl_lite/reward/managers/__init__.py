"""Reward managers: turn decoded responses into scores (``reward.reward_manager`` selects one).

Importing this package registers ``naive``, ``dapo`` and ``batch``.
"""

from __future__ import annotations

from . import batch, dapo, naive  # noqa: F401  (registers the built-in managers)
from .base import (
    REWARD_MANAGERS,
    RewardItem,
    RewardManager,
    RewardResult,
    register_reward_manager,
    to_reward_result,
)
from .batch import BatchRewardManager, build_batch_items
from .dapo import DAPORewardManager, compute_overlong_penalty
from .naive import NaiveRewardManager

__all__ = [
    "REWARD_MANAGERS",
    "BatchRewardManager",
    "DAPORewardManager",
    "NaiveRewardManager",
    "RewardItem",
    "RewardManager",
    "RewardResult",
    "build_batch_items",
    "compute_overlong_penalty",
    "get_reward_manager_cls",
    "register_reward_manager",
    "to_reward_result",
]


def get_reward_manager_cls(name: str) -> type[RewardManager]:
    """The manager class registered under ``name``; the KeyError lists the known names."""
    return REWARD_MANAGERS.get(name)
