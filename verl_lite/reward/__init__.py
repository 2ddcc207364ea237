"""Rewards of verl_lite: rule-based scorers by ``data_source``, custom reward files and reward managers.

Typical use on a rollout worker::

    from verl_lite.reward import RewardItem, build_reward_manager

    manager = build_reward_manager(config.reward)           # once
    results = manager([RewardItem(data_source=..., prompt=..., response=..., ground_truth=...)])
    scores = [r.score for r in results]                      # None where the scorer raised (r.error)

Importing this package is light (no torch, transformers or Ray).
"""

from __future__ import annotations

from .builder import build_reward_manager, validate_reward_config
from .config import (
    CustomRewardFunctionConfig,
    OverlongBufferConfig,
    RewardConfig,
    RewardModelConfig,
    RewardProcessorsConfig,
)
from .custom import is_batch_reward_fn, load_custom_reward_fn
from .managers import (
    REWARD_MANAGERS,
    BatchRewardManager,
    DAPORewardManager,
    NaiveRewardManager,
    RewardItem,
    RewardManager,
    RewardResult,
    build_batch_items,
    compute_overlong_penalty,
    get_reward_manager_cls,
    register_reward_manager,
)
from .processors import build_reward_processor
from .scorers import SCORERS, ScoreFn, default_compute_score, get_scorer, register_scorer

__all__ = [
    "REWARD_MANAGERS",
    "SCORERS",
    "BatchRewardManager",
    "CustomRewardFunctionConfig",
    "DAPORewardManager",
    "NaiveRewardManager",
    "OverlongBufferConfig",
    "RewardConfig",
    "RewardItem",
    "RewardManager",
    "RewardModelConfig",
    "RewardProcessorsConfig",
    "RewardResult",
    "ScoreFn",
    "build_batch_items",
    "build_reward_manager",
    "build_reward_processor",
    "compute_overlong_penalty",
    "default_compute_score",
    "get_reward_manager_cls",
    "get_scorer",
    "is_batch_reward_fn",
    "load_custom_reward_fn",
    "register_reward_manager",
    "register_scorer",
    "validate_reward_config",
]
