"""Synthetic preference pairs for reward models: a correct worked solution versus one with a wrong final answer."""

from __future__ import annotations

import numpy as np

from verl_lite.data.files import read_rows
from verl_lite.trainer.sft.data import Row


def make_wrong_answer(solution: str, rng: np.random.Generator) -> str:
    """``solution`` with its ``#### N`` line changed to a different number (the worked steps stay)."""
    head, sep, answer = solution.rpartition("#### ")
    if not sep:
        raise ValueError(f"solution has no '#### ' final-answer line: {solution!r}.")
    value = int(answer.strip())
    offset = int(rng.choice([-3, -2, -1, 1, 2, 3]))
    return f"{head}#### {value + offset}"


def synthetic_preference_rows(rl_parquet: str, n: int, seed: int = 0) -> list[Row]:
    """``n`` string-form pairs (``prompt``, ``chosen``, ``rejected``) from the synthetic task's RL rows.

    The task's rows carry the question and its worked solution in ``extra_info``; the rejected
    answer repeats the solution with a wrong final answer.
    """
    rng = np.random.default_rng(seed)
    rows = read_rows(rl_parquet)[:n]
    return [
        {
            "prompt": row["extra_info"]["question"],
            "chosen": row["extra_info"]["answer"],
            "rejected": make_wrong_answer(row["extra_info"]["answer"], rng),
        }
        for row in rows
    ]
