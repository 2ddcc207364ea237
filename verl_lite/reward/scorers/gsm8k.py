"""Score GSM8K responses: the predicted number (``#### <n>`` or the last number) against the answer.

Modes (``reward.reward_kwargs.method``):

* ``strict``: the number after the last ``####`` marker, the format GSM8K solutions end with.
* ``flexible``: the last number anywhere in the response (for models that answer in prose).

Commas and ``$`` are stripped from numbers; ``1,234.00`` equals ``1234``.
"""

from __future__ import annotations

import re
from typing import Any

from .registry import register_scorer

__all__ = ["compute_gsm8k_score", "extract_gsm8k_answer"]

# a number with optional sign, "$", thousands separators and decimals: -$1,234.5
_NUMBER = r"-?\$?-?\d[\d,]*(?:\.\d+)?"
_STRICT = re.compile(r"####\s*(" + _NUMBER + ")")
_ANY_NUMBER = re.compile(_NUMBER)
METHODS = ("strict", "flexible")


def extract_gsm8k_answer(text: str, method: str = "strict") -> str | None:
    """The predicted number of ``text`` as a plain string (``"-1234.5"``), or None when there is none."""
    if method not in METHODS:
        raise ValueError(f"gsm8k method={method!r} is invalid; use one of {list(METHODS)}.")
    pattern, group = (_STRICT, 1) if method == "strict" else (_ANY_NUMBER, 0)
    matches = [m.group(group) for m in pattern.finditer(text)]
    if not matches:
        return None
    return matches[-1].replace(",", "").replace("$", "")


def _to_number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _ground_truth_number(ground_truth: Any) -> float | None:
    """The reference number; a full worked solution ending with ``#### n`` is accepted too."""
    text = str(ground_truth).strip()
    if "####" in text:
        text = extract_gsm8k_answer(text, "strict") or ""
    return _to_number(text.replace(",", "").replace("$", ""))


@register_scorer("openai/gsm8k", "gsm8k")
def compute_gsm8k_score(
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
) -> dict[str, Any]:
    """Reward of one GSM8K response.

    Args:
        solution_str: the decoded response.
        ground_truth: the reference answer, e.g. ``"72"`` or ``"1,234"``.
        extra_info: unused (part of the scorer signature).
        method: ``"strict"`` or ``"flexible"`` (see the module docstring).
        format_score: reward when a number was found but is wrong.
        score: reward of a correct answer.

    Returns:
        ``{"score": score | format_score | 0.0, "acc": 1.0 | 0.0, "pred": number or None}``; 0.0 when
        no number was found. ``pred`` is the number in one spelling (``"1,234.00"`` -> ``"1234"``), so
        equal answers get one vote in maj@N.
    """
    answer = extract_gsm8k_answer(solution_str, method)
    if answer is None:
        return {"score": 0.0, "acc": 0.0, "pred": None}
    predicted, expected = _to_number(answer), _ground_truth_number(ground_truth)
    correct = predicted is not None and expected is not None and abs(predicted - expected) < 1e-6
    return {
        "score": score if correct else format_score,
        "acc": float(correct),
        "pred": _spelling(answer, predicted),
    }


def _spelling(answer: str, number: float | None) -> str:
    """One string per number: integers without decimals (``"72.0"`` -> ``"72"``), others by ``repr``."""
    if number is None:
        return answer
    if number.is_integer():
        return str(int(number))
    return repr(number)
