"""Fixtures for the data tests: a small tokenizer trained on the synthetic task."""

from __future__ import annotations

import pytest

from verl_lite.data.synthetic import generate_splits
from verl_lite.data.tokenizer import build_tokenizer


@pytest.fixture(scope="session")
def tokenizer():
    """Byte-level BPE chat tokenizer built from 300 synthetic problems (well under a second)."""
    problems = generate_splits({"sft": 300}, seed=0)["sft"]
    return build_tokenizer([p.question for p in problems] + [p.solution for p in problems])


def chat(question: str, answer: str) -> list[dict[str, str]]:
    """A one-turn conversation."""
    return [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
