"""Score reasoning-gym rows (``verl_lite.data.reasoning_gym``) with the generator's own ``score_answer``.

When reasoning_gym is installed, one scorer is registered per generator under
``reasoning_gym/<generator>`` (on first use: :func:`register_generators`); the answer is the text of the response's last ``<answer>...</answer>``
(reasoning-gym's ``extract_answer``), judged against the row's stored entry.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterable
from functools import partial
from typing import Any

from .registry import register_scorer

__all__ = ["DATA_SOURCE_PREFIX", "compute_reasoning_gym_score", "installed", "register_generators"]

# equals verl_lite.data.reasoning_gym.DATA_SOURCE_PREFIX; spelled out so importing the scorer skips pandas
DATA_SOURCE_PREFIX = "reasoning_gym/"


def compute_reasoning_gym_score(
    solution_str: str, ground_truth: Any, extra_info: dict | None = None, *, generator: str
) -> dict[str, Any]:
    """Reward of one response to a row of reasoning-gym generator ``generator``.

    Returns:
        ``{"score": score_answer's value (0..1), "acc": 1.0 when it is 1 else 0.0, "pred": the answer or None}``.
    """
    from reasoning_gym import get_score_answer_fn
    from reasoning_gym.utils import extract_answer

    entry = json.loads(extra_info["entry"])
    answer = extract_answer(solution_str)
    score = float(get_score_answer_fn(generator)(answer, entry))
    return {"score": score, "acc": float(score == 1.0), "pred": answer}


_registered = False


def register_generators(data_sources: Iterable[str]) -> None:
    """Register one scorer per reasoning-gym generator the first time ``data_sources`` name one.

    reasoning_gym takes about a second to import: processes whose rows come from elsewhere never pay
    it. Nothing is registered when reasoning_gym is not installed.
    """
    global _registered
    if _registered or not any(source.startswith(DATA_SOURCE_PREFIX) for source in data_sources):
        return
    _registered = True
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError:
        return
    for name in DATASETS:
        register_scorer(DATA_SOURCE_PREFIX + name)(partial(compute_reasoning_gym_score, generator=name))


def installed() -> bool:
    """Whether reasoning_gym can be imported (without importing it)."""
    return importlib.util.find_spec("reasoning_gym") is not None
