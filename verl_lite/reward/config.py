"""Typed ``reward`` config group: which manager scores responses, with which function and post-processing.

Each dataclass mirrors one yaml node under ``reward:``; build the whole tree from a dict or an
OmegaConf node with :meth:`RewardConfig.from_any`. Values are validated on construction and are
read-only afterwards. The defaults are those of the ``reward:`` group of ``configs/ppo_trainer.yaml``
(``tests/test_docs_config.py`` checks that they agree).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from verl_lite.utils.config import from_config

__all__ = [
    "CustomRewardFunctionConfig",
    "OverlongBufferConfig",
    "RewardConfig",
    "RM_COMBINE_MODES",
    "RewardModelConfig",
    "RewardModelWeightsConfig",
    "RewardProcessorsConfig",
]


@dataclass(frozen=True)
class CustomRewardFunctionConfig:
    """A user reward function loaded from a python file instead of the built-in scorers."""

    # Path of the python file defining the function; null uses the built-in scorers (by data_source).
    path: str | None = None
    # Name of the function in that file. A parameter named ``batch_items`` marks the batch form.
    name: str = "compute_score"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(
                f"reward.custom_reward_function.name={self.name!r} is invalid; use a python function name."
            )


@dataclass(frozen=True)
class OverlongBufferConfig:
    """DAPO's soft overlong punishment (https://arxiv.org/abs/2503.14476, section 3.4).

    Responses longer than ``max_response_length - len`` tokens lose up to ``penalty_factor`` reward,
    linearly over the last ``len`` tokens. Used by the ``dapo`` reward manager only.
    """

    # Apply the penalty.
    enable: bool = False
    # Length of the buffer zone at the end of the response budget, in tokens (> 0 when enabled).
    len: int = 0
    # Penalty at the budget's end (a response of max_response_length tokens gets -penalty_factor).
    penalty_factor: float = 1.0

    def __post_init__(self) -> None:
        if self.enable and (not isinstance(self.len, int) or self.len <= 0):
            raise ValueError(
                f"reward.overlong_buffer.len={self.len!r} is invalid with enable=true; use a token count > 0."
            )
        if self.penalty_factor < 0:
            raise ValueError(
                f"reward.overlong_buffer.penalty_factor={self.penalty_factor} is invalid; use a value >= 0."
            )


@dataclass(frozen=True)
class RewardProcessorsConfig:
    """Post-processing of every final score: ``clip(score * scale, clip_min, clip_max)``."""

    # Multiplies the score (after the overlong penalty).
    scale: float = 1.0
    # Lower bound of the scaled score; null means unbounded.
    clip_min: float | None = None
    # Upper bound of the scaled score; null means unbounded.
    clip_max: float | None = None

    def __post_init__(self) -> None:
        if not math.isfinite(self.scale):
            raise ValueError(f"reward.processors.scale={self.scale} is invalid; use a finite number.")
        if self.clip_min is not None and self.clip_max is not None and self.clip_min > self.clip_max:
            raise ValueError(
                f"reward.processors.clip_min={self.clip_min} is above clip_max={self.clip_max}; swap them."
            )


# How a reward model's score meets the rule-based score: replace (verl's behaviour: the model's score
# only) or add (rule score + model score).
RM_COMBINE_MODES = ("replace", "add")


@dataclass(frozen=True)
class RewardModelWeightsConfig:
    """Where the learned reward model comes from."""

    # AutoModelForSequenceClassification folder (num_labels=1), e.g. main_rm's export; required when enabled.
    path: str | None = None
    # Pass trust_remote_code to transformers.
    trust_remote_code: bool = False


@dataclass(frozen=True)
class RewardModelConfig:
    """A learned reward model, run by the ``RewardModel`` role (``verl_lite.workers.reward_model``)."""

    # Score every training response with the reward model (its worker writes the ``rm_scores`` field).
    enable: bool = False
    # replace: reward = model score (verl's behaviour); add: reward = rule-based score + model score.
    combine: str = "replace"
    # Sequences per reward-model forward on one worker.
    micro_batch_size_per_gpu: int = 64
    # The model folder.
    model: RewardModelWeightsConfig = field(default_factory=RewardModelWeightsConfig)

    def __post_init__(self) -> None:
        if self.enable and not self.model.path:
            raise ValueError(
                "reward.reward_model.model.path is empty with enable=true; give the reward model's folder."
            )
        if self.combine not in RM_COMBINE_MODES:
            raise ValueError(
                f"reward.reward_model.combine={self.combine!r} is invalid; use one of {', '.join(RM_COMBINE_MODES)}."
            )
        if not isinstance(self.micro_batch_size_per_gpu, int) or self.micro_batch_size_per_gpu < 1:
            raise ValueError(
                f"reward.reward_model.micro_batch_size_per_gpu={self.micro_batch_size_per_gpu!r} is invalid; "
                "use a positive integer."
            )


@dataclass(frozen=True)
class RewardConfig:
    """The ``reward`` config group."""

    # Registered reward manager: naive (per sample), dapo (naive + overlong penalty), batch (one call).
    reward_manager: str = "naive"
    # User reward function from a file; replaces the built-in scorers when its path is set.
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    # DAPO overlong penalty (dapo manager).
    overlong_buffer: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)
    # Scale and clip applied to every final score.
    processors: RewardProcessorsConfig = field(default_factory=RewardProcessorsConfig)
    # Learned reward model (scored by the RewardModel role, combined by the reward manager).
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    # Extra keyword arguments for the scoring function (e.g. {method: flexible} for GSM8K).
    reward_kwargs: dict[str, Any] = field(default_factory=dict)
    # Stop the run, with the reward function's own message, once this fraction of the last
    # failure_window scored prompt groups failed to score (a group fails when any of its samples does).
    max_failure_fraction: float = 1.0
    # How many of the most recently scored prompt groups that fraction is computed over.
    failure_window: int = 32

    def __post_init__(self) -> None:
        if not isinstance(self.reward_manager, str) or not self.reward_manager:
            raise ValueError(f"reward.reward_manager={self.reward_manager!r} is invalid; use e.g. 'naive'.")
        fraction = self.max_failure_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction <= 1:
            raise ValueError(
                f"reward.max_failure_fraction={fraction!r} is invalid; use a fraction in (0, 1] "
                "(1: stop only when every group of the window failed to score)."
            )
        window = self.failure_window
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(
                f"reward.failure_window={window!r} is invalid; use a positive number of prompt groups."
            )
        if not isinstance(self.reward_kwargs, dict):
            raise ValueError(f"reward.reward_kwargs={self.reward_kwargs!r} is invalid; use a mapping.")

    @classmethod
    def from_any(cls, config: Any = None) -> RewardConfig:
        """Build from None, a ``RewardConfig``, a dict or an OmegaConf node; unknown keys are an error."""
        return from_config(cls, config, "reward.")
