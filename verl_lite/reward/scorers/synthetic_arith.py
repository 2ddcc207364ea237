"""Score the embedded synthetic arithmetic task (``verl_lite.data.synthetic``) with its own scorer."""

from __future__ import annotations

from typing import Any

from verl_lite.data.scoring import compute_score, extract_answer

from .registry import register_scorer

__all__ = ["SYNTHETIC_DATA_SOURCE", "compute_synthetic_score"]

# equals verl_lite.data.synthetic.DATA_SOURCE; spelled out so importing the scorer skips pandas
SYNTHETIC_DATA_SOURCE = "synthetic_arith"


@register_scorer(SYNTHETIC_DATA_SOURCE)
def compute_synthetic_score(
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    format_score: float = 0.0,
    score: float = 1.0,
) -> dict[str, Any]:
    """Reward of one synthetic-task response (last ``#### <int>`` against the answer).

    Returns:
        ``{"score": ..., "acc": 1.0 | 0.0, "pred": answer or None}``; ``score``/``format_score``/0.0
        as in :func:`verl_lite.data.scoring.compute_score`; ``pred`` feeds majority voting (maj@N).
    """
    reward = compute_score(solution_str, str(ground_truth), format_score=format_score, score=score)
    correct = compute_score(solution_str, str(ground_truth)) == 1.0
    return {"score": reward, "acc": float(correct), "pred": extract_answer(solution_str)}
