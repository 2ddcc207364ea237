"""Score MATH (Hendrycks et al.) responses: the last ``\\boxed{...}`` against the reference answer.

Both sides go through a light normalisation (:func:`normalize_math_answer`) and are then compared as
strings. It removes spacing and presentation differences (``\\left(`` vs ``(``, ``\\dfrac`` vs
``\\frac``, ``90^\\circ`` vs ``90``, ``5\\text{ cm}`` vs ``5``); it does not prove mathematical
equivalence (``0.5`` and ``\\frac{1}{2}`` still differ).
"""

from __future__ import annotations

import re
from typing import Any

from .registry import register_scorer

__all__ = ["compute_math_score", "last_boxed_content", "normalize_math_answer"]

_BOX_COMMANDS = ("\\boxed", "\\fbox")


def last_boxed_content(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, nested braces included.

    ``\\boxed 5`` (no braces) yields ``"5"``. Returns None when there is no box or its braces never
    close (a response cut off by the length limit).
    """
    start = max(text.rfind(cmd) for cmd in _BOX_COMMANDS)
    if start < 0:
        return None
    rest = text[start:]
    rest = rest[len("\\boxed") :] if rest.startswith("\\boxed") else rest[len("\\fbox") :]
    if rest.startswith(" "):
        match = re.match(r"\s+([^\s$]+)", rest)
        return match.group(1) if match else None
    if not rest.startswith("{"):
        return None
    depth = 0
    for i, char in enumerate(rest):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return rest[1:i]
    return None


def normalize_math_answer(answer: str) -> str:
    """Canonical string form of an answer, for string comparison (see the module docstring)."""
    s = answer.strip()
    # a trailing unit: "5\text{ cm}" -> "5" (a lone "\text{A}" is an answer, unwrapped below)
    s = re.sub(r"(?<=\S)\s*\\(?:text|mbox|mathrm)\{[^{}]*\}\s*$", "", s)
    s = re.sub(r"\\(?:text|textbf|mbox|mathrm)\{([^{}]*)\}", r"\1", s)
    s = re.sub(r"\\(?:left|right)(?![A-Za-z])", "", s)
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = re.sub(r"\^\s*\{?\s*\\circ\s*\}?", "", s)
    for token in ("\\!", "\\,", "\\;", "\\:", "\\$", "$"):
        s = s.replace(token, "")
    s = re.sub(r"\s+", "", s)
    return s.rstrip(".")


@register_scorer("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500", "math")
def compute_math_score(
    solution_str: str, ground_truth: Any, extra_info: dict | None = None
) -> dict[str, Any]:
    """Reward of one MATH response: 1.0 when its last boxed answer matches ``ground_truth``, else 0.0.

    Args:
        solution_str: the decoded response.
        ground_truth: the reference answer (``"\\frac{1}{2}"``), or a full solution with a box.
        extra_info: unused (part of the scorer signature).

    Returns:
        ``{"score": 1.0 | 0.0, "acc": 1.0 | 0.0, "pred": normalised boxed answer or None}``; answers
        that normalise alike get one vote in maj@N.
    """
    boxed = last_boxed_content(solution_str)
    reference = str(ground_truth)
    if "\\boxed" in reference or "\\fbox" in reference:
        reference = last_boxed_content(reference) or reference
    predicted = None if boxed is None else normalize_math_answer(boxed)
    correct = predicted is not None and predicted == normalize_math_answer(reference)
    return {"score": float(correct), "acc": float(correct), "pred": predicted}
