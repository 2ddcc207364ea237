"""The table of rule-based scorers, keyed by the ``data_source`` column of a prompt row.

A scorer judges one decoded response against the row's ``reward_model.ground_truth``::

    scorer(solution_str, ground_truth, extra_info=None, **kwargs) -> float | dict

A dict result carries ``"score"`` (the reward) plus extra numeric fields such as ``"acc"`` that the
trainer logs as metrics. Keyword arguments come from ``reward.reward_kwargs``; each scorer receives
only the keywords its signature names (see :func:`select_kwargs`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from verl_lite.utils.registry import Registry

__all__ = ["SCORERS", "ScoreFn", "accepted_kwargs", "register_scorer", "select_kwargs"]

# scorer(solution_str, ground_truth, extra_info=None, **kwargs) -> float | {"score": float, ...}
ScoreFn = Callable[..., "float | dict[str, Any]"]

SCORERS: Registry[ScoreFn] = Registry("scorer (data_source)")


def register_scorer(*data_sources: str) -> Callable[[ScoreFn], ScoreFn]:
    """Decorator registering one scorer under every name in ``data_sources``.

    Example::

        @register_scorer("openai/gsm8k", "gsm8k")
        def compute_gsm8k_score(solution_str, ground_truth, extra_info=None, method="strict"): ...
    """
    if not data_sources:
        raise ValueError("register_scorer: give at least one data_source name.")

    def decorator(fn: ScoreFn) -> ScoreFn:
        for name in data_sources:
            SCORERS.register(name)(fn)
        return fn

    return decorator


def accepted_kwargs(fn: Callable[..., Any]) -> set[str] | None:
    """Keyword names ``fn`` accepts, or None when it takes ``**kwargs`` (it accepts any keyword)."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def select_kwargs(fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The subset of ``kwargs`` that ``fn`` accepts.

    Why: one ``reward.reward_kwargs`` serves every data source of a mixed dataset, so a GSM8K-only
    option (``method``) must not break the MATH scorer. ``validate_reward_config`` catches keys that
    no configured scorer accepts (typos).
    """
    names = accepted_kwargs(fn)
    return dict(kwargs) if names is None else {k: v for k, v in kwargs.items() if k in names}
