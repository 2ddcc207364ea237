"""Custom reward files: loading by path, both calling forms, and the errors users see."""

import pickle
import textwrap
from pathlib import Path

import pytest

from verl_lite.reward import (
    RewardConfig,
    RewardItem,
    build_reward_manager,
    is_batch_reward_fn,
    load_custom_reward_fn,
)

REPO = Path(__file__).resolve().parents[2]

SOURCE = textwrap.dedent(
    """
    from dataclasses import dataclass

    @dataclass
    class Weights:  # dataclasses in the file must work
        hit: float = 1.0

    def compute_score(data_source, solution_str, ground_truth, extra_info, bonus=0.0):
        return {"score": Weights().hit * (solution_str == ground_truth) + bonus, "len": len(solution_str)}

    def rank_batch(batch_items):
        return [float(i) for i, _ in enumerate(batch_items)]

    def too_few(solution_str, ground_truth):
        return 0.0

    def two_positionals(a, b, *, batch_items):
        return []

    NOT_A_FUNCTION = 3
    """
)


@pytest.fixture
def reward_file(tmp_path):
    path = tmp_path / "my_reward.py"
    path.write_text(SOURCE)
    return path


def rows(*responses):
    return [RewardItem("x/any", "p", r, "yes", {}, len(r), 16, {"id": i}) for i, r in enumerate(responses)]


def test_per_sample_function_is_loaded_and_scores(reward_file):
    fn = load_custom_reward_fn(reward_file, "compute_score")
    assert not is_batch_reward_fn(fn)
    config = RewardConfig.from_any(
        {"custom_reward_function": {"path": str(reward_file)}, "reward_kwargs": {"bonus": 0.5}}
    )
    results = build_reward_manager(config)(rows("yes", "no"))
    # the custom function replaces the built-in scorers, so "x/any" needs no registered scorer
    assert [r.score for r in results] == [1.5, 0.5] and results[0].extra == {"len": 3}


def test_batch_function_is_detected_by_batch_items_parameter(reward_file):
    fn = load_custom_reward_fn(reward_file, "rank_batch")
    assert is_batch_reward_fn(fn)
    config = {
        "reward_manager": "batch",
        "custom_reward_function": {"path": str(reward_file), "name": "rank_batch"},
    }
    assert [r.score for r in build_reward_manager(config)(rows("a", "b", "c"))] == [0.0, 1.0, 2.0]


def test_loaded_function_pickles_by_value(reward_file):
    # Ray ships the function to rollout workers, which cannot import the file by module name
    fn = pickle.loads(__import__("cloudpickle").dumps(load_custom_reward_fn(reward_file)))
    assert fn("d", "yes", "yes", {})["score"] == 1.0


def test_missing_file_error_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.py"):
        load_custom_reward_fn(tmp_path / "nope.py", "compute_score")


def test_missing_function_error_names_file_function_and_alternatives(reward_file):
    with pytest.raises(ValueError, match=r"my_reward\.py.*'score_fn'.*compute_score, rank_batch, too_few"):
        load_custom_reward_fn(reward_file, "score_fn")
    with pytest.raises(ValueError, match="NOT_A_FUNCTION"):
        load_custom_reward_fn(reward_file, "NOT_A_FUNCTION")


def test_signature_that_fits_neither_form_is_rejected_at_load(reward_file):
    with pytest.raises(ValueError, match=r"too_few.*\['data_source', 'extra_info'\]"):
        load_custom_reward_fn(reward_file, "too_few")
    with pytest.raises(ValueError, match="at most one"):
        load_custom_reward_fn(reward_file, "two_positionals")


def test_reward_kwargs_the_function_cannot_take_fail_at_build(reward_file):
    config = {"custom_reward_function": {"path": str(reward_file)}, "reward_kwargs": {"bonnus": 1}}
    with pytest.raises(ValueError, match="bonnus"):
        build_reward_manager(config)


def test_shipped_example_functions_load_and_score():
    path = REPO / "examples" / "custom_reward.py"
    per_sample = load_custom_reward_fn(path, "compute_score")
    batch = load_custom_reward_fn(path, "compute_score_batch")
    assert not is_batch_reward_fn(per_sample) and is_batch_reward_fn(batch)
    manager = build_reward_manager(
        {
            "reward_manager": "batch",
            "custom_reward_function": {"path": str(path), "name": "compute_score_batch"},
            "reward_kwargs": {"length_bonus": 0.25},
        }
    )
    items = [
        RewardItem("synthetic_arith", "p", r, "7", {}, 4, 16, {})
        for r in ("#### 7", "1+6=7 #### 7", "#### 8")
    ]
    # both correct, the shorter one gets the bonus; the wrong one scores 0
    assert [r.score for r in manager(items)] == [1.25, 1.0, 0.0]
