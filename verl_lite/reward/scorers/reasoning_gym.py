"""Score reasoning-gym rows (``verl_lite.data.reasoning_gym``) with the generator's own ``score_answer``.

When reasoning_gym is installed, one scorer is registered per generator under
``reasoning_gym/<generator>``; the answer is the text of the response's last ``<answer>...</answer>``
(reasoning-gym's ``extract_answer``), judged against the row's stored entry.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from .registry import register_scorer

__all__ = ["DATA_SOURCE_PREFIX", "compute_reasoning_gym_score"]

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


def _register_generators() -> None:
    """One scorer per reasoning-gym generator; nothing when reasoning_gym is not installed."""
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError:
        return
    for name in DATASETS:
        register_scorer(DATA_SOURCE_PREFIX + name)(partial(compute_reasoning_gym_score, generator=name))


_register_generators()
