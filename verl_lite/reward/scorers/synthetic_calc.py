"""Score the calculator tool task (``verl_lite.data.synthetic_tools``) by the answer the assistant states."""

from __future__ import annotations

import re
from typing import Any

from .registry import register_scorer
from .synthetic_arith import compute_synthetic_score

__all__ = ["CALC_DATA_SOURCE", "assistant_text", "compute_calc_score"]

# equals verl_lite.data.synthetic_tools.DATA_SOURCE; spelled out so importing the scorer skips pandas
CALC_DATA_SOURCE = "synthetic_calc"
# tool calls and tool results inside a multi-turn response (hermes format)
_TOOL_BLOCK = re.compile(r"<tool_call>.*?(</tool_call>|$)|<tool_response>.*?(</tool_response>|$)", re.DOTALL)


def assistant_text(solution_str: str) -> str:
    """``solution_str`` without its ``<tool_call>`` and ``<tool_response>`` blocks (unclosed: to the end).

    A multi-turn response holds the tool observations too; only what the assistant wrote outside
    them counts as its answer, so a number echoed by a tool or typed into a call earns nothing.
    """
    return _TOOL_BLOCK.sub(" ", solution_str)


@register_scorer(CALC_DATA_SOURCE)
def compute_calc_score(
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    format_score: float = 0.0,
    score: float = 1.0,
) -> dict[str, Any]:
    """Reward of one calculator-task response: the last ``#### <int>`` of the assistant's own text.

    Returns:
        :func:`compute_synthetic_score`'s ``{"score", "acc", "pred"}`` of that text, plus ``used_tool``
        (1.0 | 0.0): whether the response holds a tool call (a step metric: the share of rollouts calling
        the tool).
    """
    result = compute_synthetic_score(
        assistant_text(solution_str), ground_truth, extra_info, format_score, score
    )
    return {**result, "used_tool": float("<tool_call>" in solution_str)}
