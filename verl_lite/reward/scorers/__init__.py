"""Rule-based scorers chosen by ``data_source``, and the dispatcher the reward managers call by default.

Importing this package registers the built-in scorers (GSM8K, MATH, the synthetic task and its
calculator variant; reasoning-gym's generators on first use when it is installed). Add your own with :func:`register_scorer`, or point
``reward.custom_reward_function.path`` at a file.
"""

from __future__ import annotations

from typing import Any

from . import gsm8k, hendrycks_math, reasoning_gym, synthetic_arith, synthetic_calc  # noqa: F401  (registers them)
from .registry import SCORERS, ScoreFn, accepted_kwargs, register_scorer, select_kwargs

__all__ = [
    "SCORERS",
    "ScoreFn",
    "accepted_kwargs",
    "default_compute_score",
    "get_scorer",
    "known_data_sources",
    "register_scorer",
    "select_kwargs",
]


def known_data_sources() -> str:
    """The registered data sources for an error message, reasoning-gym's generators as one entry."""
    prefix = reasoning_gym.DATA_SOURCE_PREFIX
    names = [n for n in SCORERS.names() if not n.startswith(prefix)]
    if reasoning_gym.installed():
        names.append(f"{prefix}<generator> (reasoning-gym's generators)")
    return ", ".join(names)


def get_scorer(data_source: str) -> ScoreFn:
    """The scorer registered for ``data_source``; ValueError naming it and the known sources otherwise."""
    reasoning_gym.register_generators([data_source])
    if data_source not in SCORERS:
        raise ValueError(
            f"no reward scorer for data_source {data_source!r}; known data sources: "
            f"{known_data_sources()}. Register one with verl_lite.reward.register_scorer or set "
            "reward.custom_reward_function.path."
        )
    return SCORERS.get(data_source)


def default_compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    **kwargs: Any,
) -> float | dict[str, Any]:
    """Score one response with the scorer registered for its ``data_source``.

    Args:
        data_source: the row's ``data_source`` (e.g. ``"openai/gsm8k"``).
        solution_str: the decoded response.
        ground_truth: the row's ``reward_model.ground_truth``.
        extra_info: the row's ``extra_info`` (may be None).
        **kwargs: ``reward.reward_kwargs``; the scorer gets the keywords it names.

    Returns:
        A float, or a dict with ``"score"`` and extra metric fields.
    """
    scorer = get_scorer(data_source)
    return scorer(solution_str, ground_truth, extra_info, **select_kwargs(scorer, kwargs))
