"""compute_score: the last "#### <int>" decides; wrong-but-formatted answers get format_score."""

from __future__ import annotations

import pytest

from verl_lite.data.scoring import compute_score, extract_answer


@pytest.mark.parametrize(
    ("response", "truth", "expected"),
    [
        ("3+4=7\n7-2=5\n#### 5", "5", 1.0),
        ("#### 5<|end|><|endoftext|>", "5", 1.0),  # special tokens left in the text are ignored
        ("#### 4\nno, wait\n#### 5", "5", 1.0),  # the last marker counts
        ("#### 5\n#### 4", "5", 0.0),
        ("#### 1,200", "1200", 1.0),
        ("#### -5", "-5", 1.0),
        ("the answer is 5", "5", 0.0),  # no marker, no reward
        ("####", "5", 0.0),
    ],
)
def test_compute_score_cases(response, truth, expected):
    assert compute_score(response, truth) == expected


def test_format_score_rewards_a_wrong_answer_in_the_right_format():
    assert compute_score("#### 6", "5", format_score=0.1) == 0.1
    assert compute_score("6", "5", format_score=0.1) == 0.0
    assert extract_answer("x #### 12 y #### 13") == "13"
