"""The reasoning-gym scorer is the generator's own score_answer on the ``<answer>`` of a response."""

from __future__ import annotations

import json

import pytest
import reasoning_gym

from verl_lite.data.reasoning_gym import ReasoningGymConfig, split_sizes, write_reasoning_gym_files
from verl_lite.reward.scorers import default_compute_score, get_scorer


def test_a_response_is_scored_by_the_generators_score_answer():
    entry = reasoning_gym.create_dataset("leg_counting", size=1, seed=3)[0]
    extra = {"entry": json.dumps(entry)}
    right = default_compute_score(
        "reasoning_gym/leg_counting", f"so <answer>{entry['answer']}</answer>", "", extra
    )
    wrong = default_compute_score("reasoning_gym/leg_counting", "<answer>-1</answer>", "", extra)
    untagged = default_compute_score("reasoning_gym/leg_counting", entry["answer"], "", extra)
    assert right == {"score": 1.0, "acc": 1.0, "pred": entry["answer"]}
    assert wrong["score"] == 0.0 and wrong["pred"] == "-1"
    assert untagged == {"score": 0.0, "acc": 0.0, "pred": None}


def test_rows_are_shared_by_weight_and_the_same_for_the_same_seed(tmp_path):
    assert split_sizes({"a": 1, "b": 2}, 10) == {"a": 3, "b": 7}
    assert split_sizes({"a": 100, "b": 1, "c": 1}, 3) == {"a": 1, "b": 1, "c": 1}
    cfg = ReasoningGymConfig(generators={"leg_counting": 1.0}, train_size=3, val_size=2, seed=5)
    first = [open(p, "rb").read() for p in write_reasoning_gym_files(cfg, str(tmp_path / "a"))]
    again = [open(p, "rb").read() for p in write_reasoning_gym_files(cfg, str(tmp_path / "b"))]
    assert first == again


def test_an_unknown_data_source_names_the_reasoning_gym_generators_as_one_entry():
    with pytest.raises(ValueError) as info:
        get_scorer("reasoning_gym/no_such_task")
    message = str(info.value)
    assert "reasoning_gym/<generator> (" in message and "reasoning_gym/leg_counting" not in message
    assert "openai/gsm8k" in message and len(message) < 600
