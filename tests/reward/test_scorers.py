"""Built-in scorers (GSM8K, MATH, synthetic task) and the data_source dispatcher."""

import pytest

from verl_lite.reward import SCORERS, default_compute_score, register_scorer
from verl_lite.reward.scorers.gsm8k import compute_gsm8k_score, extract_gsm8k_answer
from verl_lite.reward.scorers.hendrycks_math import (
    compute_math_score,
    last_boxed_content,
    normalize_math_answer,
)


@pytest.mark.parametrize(
    ("text", "method", "expected"),
    [
        ("2+3=5\n#### 5", "strict", "5"),
        ("#### 1\nwait\n#### $1,234", "strict", "1234"),  # last marker wins; $ and commas stripped
        ("#### -7.5", "strict", "-7.5"),
        ("The answer is 42.", "strict", None),  # no marker
        ("The answer is 42.", "flexible", "42"),  # trailing period is not part of the number
        ("He pays $1,200 then 30 more: 1,230", "flexible", "1230"),
        ("no digits here", "flexible", None),
    ],
)
def test_gsm8k_extracts_answer_per_method(text, method, expected):
    assert extract_gsm8k_answer(text, method) == expected


def test_gsm8k_strict_ignores_numbers_outside_the_marker():
    # strict: no "####" -> 0; flexible finds the last number 18
    text = "She has 16 eggs and keeps 18"
    assert compute_gsm8k_score(text, "18") == {"score": 0.0, "acc": 0.0, "pred": None}
    assert compute_gsm8k_score(text, "18", method="flexible") == {"score": 1.0, "acc": 1.0, "pred": "18"}


def test_gsm8k_wrong_answer_gets_format_score_and_numbers_compare_numerically():
    assert compute_gsm8k_score("#### 17", "18", format_score=0.1) == {"score": 0.1, "acc": 0.0, "pred": "17"}
    assert compute_gsm8k_score("#### 1,234.00", "1234")["acc"] == 1.0
    # a full worked solution as ground truth is reduced to its #### answer
    assert compute_gsm8k_score("#### 72", "48/2=24\n48+24=72\n#### 72")["score"] == 1.0


def test_gsm8k_rejects_unknown_method():
    with pytest.raises(ValueError, match="strict"):
        compute_gsm8k_score("#### 1", "1", method="loose")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so \boxed{5}", "5"),
        (r"\boxed{1} then \boxed{\frac{1}{2}}", r"\frac{1}{2}"),  # last box, nested braces
        (r"\boxed{\left\{ 1, \{2\} \right\}}", r"\left\{ 1, \{2\} \right\}"),
        (r"\fbox{x^{2}}", "x^{2}"),
        (r"$\boxed 7$", "7"),
        (r"\boxed{\frac{1}{2", None),  # cut off before the box closed
        ("no box", None),
    ],
)
def test_last_boxed_content_handles_nesting_and_truncation(text, expected):
    assert last_boxed_content(text) == expected


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (r"\dfrac{1}{2}", r"\frac{1}{2}"),
        (r"\left( 1, 2 \right)", "(1,2)"),
        (r"90^\circ", "90"),
        (r"90^{\circ}", "90"),
        (r"5\text{ cm}", "5"),
        (r"\text{(A)}", "(A)"),
        (r"3\!000.", "3000"),
        (r"\$ 4.50", "4.50"),
    ],
)
def test_normalize_math_answer(answer, expected):
    assert normalize_math_answer(answer) == expected


def test_math_score_compares_normalised_boxed_answers():
    right = {"score": 1.0, "acc": 1.0, "pred": r"\frac{3}{4}"}  # pred: the normalised box
    assert compute_math_score(r"Thus $\boxed{\dfrac{ 3 }{4}}$.", r"\frac{3}{4}") == right
    assert compute_math_score(r"\boxed{0.75}", r"\frac{3}{4}")["score"] == 0.0  # no numeric equivalence
    assert compute_math_score("3/4", r"\frac{3}{4}")["score"] == 0.0  # no box
    # the reference may be a full solution with its own box
    assert compute_math_score(r"\boxed{12}", r"so \boxed{12}.")["score"] == 1.0


@pytest.mark.parametrize("source", ["lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "math"])
def test_math_data_sources_dispatch_to_math_scorer(source):
    assert default_compute_score(source, r"\boxed{2}", "2")["score"] == 1.0


def test_synthetic_task_uses_its_own_scorer():
    from verl_lite.data.synthetic import DATA_SOURCE

    assert DATA_SOURCE in SCORERS  # the scorer module spells the name out; keep it in sync
    assert default_compute_score(DATA_SOURCE, "3+4=7\n#### 7", "7") == {"score": 1.0, "acc": 1.0, "pred": "7"}
    wrong = default_compute_score(DATA_SOURCE, "#### 8", "7", format_score=0.1)
    assert wrong == {"score": 0.1, "acc": 0.0, "pred": "8"}
    assert default_compute_score(DATA_SOURCE, "no answer", "7")["pred"] is None


def test_dispatcher_passes_only_kwargs_the_scorer_takes():
    # "method" is a GSM8K option; the MATH scorer must not receive it
    assert default_compute_score("math", r"\boxed{2}", "2", method="flexible")["score"] == 1.0
    assert default_compute_score("openai/gsm8k", "it is 2", "2", method="flexible")["score"] == 1.0


def test_unknown_data_source_error_names_it_and_lists_known():
    with pytest.raises(ValueError, match=r"'my/dataset'.*openai/gsm8k.*synthetic_arith"):
        default_compute_score("my/dataset", "x", "y")


def test_register_scorer_under_several_names():
    @register_scorer("test/echo_a", "test/echo_b")
    def echo(solution_str, ground_truth, extra_info=None):
        return float(solution_str == ground_truth)

    assert SCORERS.get("test/echo_a") is echo and SCORERS.get("test/echo_b") is echo
    assert default_compute_score("test/echo_b", "x", "x") == 1.0
