"""The synthetic arithmetic task: determinism, disjoint splits, correct solutions and the parquet schema."""

from __future__ import annotations

import pandas as pd

from verl_lite.data.synthetic import DATA_SOURCE, compute_score, generate_splits, write_parquet

SIZES = {"val": 20, "train": 30, "sft": 50}


def test_same_seed_gives_the_same_problems_and_another_seed_does_not():
    assert generate_splits(SIZES, seed=3) == generate_splits(SIZES, seed=3)
    assert generate_splits(SIZES, seed=3)["val"] != generate_splits(SIZES, seed=4)["val"]


def test_splits_share_no_question_and_val_ignores_later_split_sizes():
    splits = generate_splits(SIZES, seed=0)
    questions = [{p.question for p in problems} for problems in splits.values()]
    assert sum(len(q) for q in questions) == len(set().union(*questions)) == sum(SIZES.values())
    assert generate_splits({"val": 20, "train": 5}, seed=0)["val"] == splits["val"]


def test_worked_solutions_are_correct_and_score_one():
    for problem in generate_splits({"val": 200}, seed=1)["val"]:
        *equations, final = problem.solution.split("\n")
        for line in equations:
            expression, result = line.split("=")
            assert eval(expression) == int(result) >= 0  # "12-8" -> 4
        assert final == f"#### {problem.answer}"
        assert compute_score(problem.solution, str(problem.answer)) == 1.0


def test_parquet_rows_follow_the_gsm8k_schema(tmp_path):
    paths = write_parquet(tmp_path, SIZES, seed=0, sft_direct_fraction=0.5)
    val = pd.read_parquet(paths["val"]).iloc[0]
    assert val["data_source"] == DATA_SOURCE and val["ability"] == "math"
    assert list(val["prompt"]) == [{"role": "user", "content": val["extra_info"]["question"]}]
    assert val["reward_model"]["style"] == "rule"
    assert val["extra_info"]["answer"].endswith(f"#### {val['reward_model']['ground_truth']}")
    sft = pd.read_parquet(paths["sft"])
    assert [m["role"] for m in sft.iloc[0]["messages"]] == ["user", "assistant"]
    direct = sft["extra_info"].map(lambda info: info["direct"])
    assert 0 < direct.sum() < len(sft)  # both answer styles are present
