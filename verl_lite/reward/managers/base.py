"""The reward-manager contract: score a list of responses, never crash on a failing scorer.

A manager turns ``RewardItem`` s (one decoded response with its prompt row) into ``RewardResult`` s.
Subclasses implement :meth:`RewardManager.score`; the base class turns scorer exceptions into
per-item errors (each distinct message logged once) and applies ``reward.processors`` to every
final score. Managers register themselves with ``@register_reward_manager(name)``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from verl_lite.utils.registry import Registry

from ..config import RewardConfig
from ..processors import build_reward_processor
from ..scorers import default_compute_score

__all__ = [
    "REWARD_MANAGERS",
    "RewardItem",
    "RewardManager",
    "RewardResult",
    "register_reward_manager",
    "to_reward_result",
]

logger = logging.getLogger(__name__)


@dataclass
class RewardItem:
    """One response to score, with everything a scorer may need from its prompt row."""

    # the row's data_source (selects the built-in scorer)
    data_source: str
    # the templated prompt text the model saw
    prompt: str
    # the decoded response (special tokens removed)
    response: str
    # the row's reward_model.ground_truth
    ground_truth: Any
    # the row's extra_info
    extra_info: dict = field(default_factory=dict)
    # valid (unpadded) response tokens
    response_length: int = 0
    # the rollout's response budget in tokens (data.max_response_length)
    max_response_length: int = 0
    # the untouched dataset row (every column)
    row: dict = field(default_factory=dict)


@dataclass
class RewardResult:
    """The reward of one response, or why it could not be computed."""

    # final reward after penalties and processors; None when the scorer raised
    score: float | None
    # extra fields returned by the scorer (e.g. acc, pred: the extracted answer) and by the manager
    # (e.g. overlong_reward)
    extra: dict = field(default_factory=dict)
    # "{ExcType}: {message}" when the scorer raised, else None
    error: str | None = None


# manager class constructed as cls(config, compute_score)
REWARD_MANAGERS: Registry[type[RewardManager]] = Registry("reward_manager")


def register_reward_manager(name: str) -> Callable[[type[RewardManager]], type[RewardManager]]:
    """Class decorator registering a ``RewardManager`` subclass under ``name`` (``reward.reward_manager``)."""
    return REWARD_MANAGERS.register(name)


def to_reward_result(value: Any) -> RewardResult:
    """Turn a scorer's return value (a number, or a dict with ``"score"``) into a ``RewardResult``."""
    if isinstance(value, dict):
        if "score" not in value:
            raise ValueError(f"reward function returned a dict without 'score' (keys: {sorted(value)}).")
        extra = {k: v for k, v in value.items() if k != "score"}
        return RewardResult(score=_as_float(value["score"]), extra=extra)
    return RewardResult(score=_as_float(value))


def _as_float(value: Any) -> float:
    try:
        score = float(value)
    except (TypeError, ValueError):
        raise TypeError(
            f"reward function returned {type(value).__name__} {value!r}; expected a number or a dict with 'score'."
        ) from None
    if math.isnan(score):
        raise ValueError("reward function returned NaN.")
    return score


class RewardManager:
    """Base class of the reward managers.

    Args:
        config: the ``reward`` group (``RewardConfig``, dict or OmegaConf node).
        compute_score: the scoring function; None uses ``default_compute_score`` (by data_source).
    """

    def __init__(self, config: RewardConfig | Any = None, compute_score: Callable[..., Any] | None = None):
        self.config = RewardConfig.from_any(config)
        self.compute_score = compute_score if compute_score is not None else default_compute_score
        self._process = build_reward_processor(self.config.processors)
        # distinct error messages already logged, so a scorer failing on every sample logs once
        self._seen_errors: set[str] = set()

    def __call__(self, items: list[RewardItem]) -> list[RewardResult]:
        """Score ``items``; returns one result per item, in order, with processors applied."""
        results = self.score(items)
        if len(results) != len(items):
            raise RuntimeError(
                f"{type(self).__name__} returned {len(results)} results for {len(items)} items."
            )
        for result in results:
            if result.score is not None:
                result.score = self._process(result.score)
        return results

    def score(self, items: list[RewardItem]) -> list[RewardResult]:
        """Raw results (before processors), one per item. Subclasses implement this."""
        raise NotImplementedError

    def combine_model_scores(self, rule_scores: list[float] | None, rm_scores: list[float]) -> list[float]:
        """Final scores when a learned reward model scored the responses too (``reward.reward_model``).

        As in verl, whose managers return ``rm_scores`` whenever the batch holds them, ``combine=replace``
        makes the model's score the reward; ``combine=add`` adds it to the rule-based score. The rule
        scores arrive already processed (the rollout scored them); ``reward.processors`` are applied to
        the model's scores here. Subclasses may override this to mix the two differently.

        Args:
            rule_scores: one processed rule-based score per response, or None when none were computed.
            rm_scores: one raw reward-model score per response.
        """
        model = [self._process(float(s)) for s in rm_scores]
        if self.config.reward_model.combine == "replace":
            return model
        if rule_scores is None or len(rule_scores) != len(model):
            raise ValueError(
                "reward.reward_model.combine=add needs one rule-based score per response, got "
                f"{'none' if rule_scores is None else len(rule_scores)} for {len(model)} responses."
            )
        return [float(r) + m for r, m in zip(rule_scores, model)]

    def error_result(self, exc: BaseException, data_source: str = "") -> RewardResult:
        """A result carrying ``exc`` as ``"{ExcType}: {message}"``; the first sighting of a message is logged."""
        message = f"{type(exc).__name__}: {exc}"
        if message not in self._seen_errors:
            self._seen_errors.add(message)
            logger.warning(
                "reward function failed (data_source=%r): %s; the sample gets no score. "
                "Later failures with the same message are not logged again.",
                data_source,
                message,
                exc_info=exc,
            )
        return RewardResult(score=None, error=message)
