"""Score a model response against a ``#### <answer>`` ground truth (synthetic arithmetic, GSM8K).

The reward module calls ``compute_score(solution_str, ground_truth)`` with the decoded response and
``reward_model["ground_truth"]`` of the prompt row; it returns a float.
"""

from __future__ import annotations

import re

__all__ = ["compute_score", "extract_answer"]

# "#### 1,234" or "#### -5"; the response is judged by its last such marker
_ANSWER = re.compile(r"####\s*(-?\d[\d,]*)")


def extract_answer(solution_str: str) -> str | None:
    """The integer after the last ``####`` in ``solution_str`` (commas removed), or None."""
    matches = _ANSWER.findall(solution_str)
    return matches[-1].replace(",", "") if matches else None


def compute_score(
    solution_str: str, ground_truth: str, format_score: float = 0.0, score: float = 1.0
) -> float:
    """Reward of one response.

    Args:
        solution_str: the decoded response (special tokens may remain; they are ignored).
        ground_truth: the expected integer as a string, e.g. ``"72"`` (commas allowed).
        format_score: reward of a response that has a ``#### <int>`` answer that is wrong.
        score: reward of a correct answer.

    Returns:
        ``score`` if the last ``#### <int>`` equals ``ground_truth``, ``format_score`` if it differs,
        0.0 if the response has no ``#### <int>``.
    """
    answer = extract_answer(solution_str)
    if answer is None:
        return 0.0
    try:
        correct = int(answer) == int(str(ground_truth).strip().replace(",", ""))
    except ValueError:
        correct = False
    return score if correct else format_score
