"""Metrics read from tags: validation mean@n, best@n, majority-vote maj@n; training accuracy and extras."""

import pytest

from verl_lite.trainer.ppo.metrics import staleness_metrics, tag_metrics, validation_metrics


def tag(uid, acc, pred, source="arith"):
    out = {"uid": uid, "acc": acc, "data_source": source}
    if pred is not None:
        out["pred"] = pred
    return out


def test_mean_best_and_majority_vote():
    tags = [
        # 2 of 4 right and the wrong answers disagree: the right answer wins the vote
        tag("a", 1.0, "7"),
        tag("a", 0.0, "8"),
        tag("a", 0.0, "9"),
        tag("a", 1.0, "7"),
        # a 2-2 tie between a wrong "6" and a right "5": the first seen ("6") wins
        tag("b", 0.0, "6"),
        tag("b", 1.0, "5"),
        tag("b", 0.0, "6"),
        tag("b", 1.0, "5"),
        # none has an answer
        tag("c", 0.0, None),
        tag("c", 0.0, None),
        tag("c", 0.0, None),
        tag("c", 0.0, None),
    ]
    out = validation_metrics(tags, 4)
    assert out["val-core/arith/acc/mean@4"] == pytest.approx(4 / 12)
    assert out["val-core/arith/acc/best@4"] == pytest.approx(2 / 3)
    assert out["val-core/arith/acc/maj@4"] == pytest.approx(1 / 3)  # a right, b tie -> "6" wrong, c none


def test_sources_are_separate_and_maj_needs_predictions():
    tags = [
        tag("a", 1.0, None, "x"),
        tag("a", 0.0, None, "x"),
        tag("b", 1.0, "3", "y"),
        tag("b", 1.0, "3", "y"),
    ]
    out = validation_metrics(tags, 2)
    assert out["val-core/x/acc/mean@2"] == 0.5 and out["val-core/x/acc/best@2"] == 1.0
    assert "val-core/x/acc/maj@2" not in out
    assert out["val-core/y/acc/maj@2"] == 1.0
    assert set(validation_metrics(tags[:2], 1)) == {"val-core/x/acc/mean@1"}


def test_training_tags_give_accuracy_clip_ratio_and_reward_extras():
    tags = [
        {"acc": 1.0, "response_len": 16, "reward_extra": {"overlong": 1.0, "overlong_reward": -0.5}},
        {"acc": 0.0, "response_len": 3, "reward_extra": {"overlong": 0.0, "overlong_reward": 0.0}},
    ]
    out = tag_metrics(tags, max_response_length=16)
    assert out == {
        "response_length/clip_ratio": 0.5,
        "critic/acc/mean": 0.5,
        "reward_extra/overlong/mean": 0.5,
        "reward_extra/overlong_reward/mean": -0.25,
    }


def test_staleness_counts_versions_from_each_trajectorys_oldest_weights():
    # trainer at version 3; oldest weights 2, 1 and the initial -1 (= version 0): ages 1, 2, 3.
    tags = [
        {"min_weight_version": 2},
        {"min_weight_version": 1, "max_weight_version": 3},
        {"min_weight_version": -1},
    ]
    assert staleness_metrics(tags, trainer_version=3) == {
        "async/staleness/mean": 2.0,
        "async/staleness/max": 3.0,
    }
    assert staleness_metrics([], trainer_version=3) == {
        "async/staleness/mean": 0.0,
        "async/staleness/max": 0.0,
    }


def _scored_tags(source: str, groups: list[tuple[str, list[str]]]) -> list[dict]:
    """Validation tags as the agent loop writes them: the default reward manager's acc and ``str(pred)``."""
    from verl_lite.reward import RewardConfig, RewardItem, build_reward_manager
    from verl_lite.reward.trajectory_scoring import score_items

    manager = build_reward_manager(RewardConfig())
    tags = []
    for uid, (ground_truth, responses) in enumerate(groups):
        items = [
            RewardItem(data_source=source, prompt="", response=r, ground_truth=ground_truth)
            for r in responses
        ]
        for scored in score_items(manager, items):
            tags.append(tag(str(uid), scored.acc, None if scored.pred is None else str(scored.pred), source))
    return tags


def test_gsm8k_rows_get_maj_at_4_with_one_vote_per_number():
    import json
    from pathlib import Path

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "gsm8k_raw.jsonl"
    answers = [
        json.loads(line)["answer"] for line in fixture.read_text().splitlines()[:3]
    ]  # ... #### 72 / 10 / 1,200
    tags = _scored_tags(
        "openai/gsm8k",
        [
            # "72" and "72.00" are one answer with 2 votes: right (counted apart, 4 singletons: "70" first, wrong)
            (answers[0], ["#### 70", "#### 72", "#### 72.00", "#### 1,000"]),
            # a wrong "12" out-votes the right "$10"
            (answers[1], ["#### 12", "#### $10", "#### 12", "no number"]),
            # "1200" and "1,200" are the reference's "1,200"
            (answers[2], ["#### 1200", "#### 1,200", "#### 5", "#### 1200.0"]),
        ],
    )
    out = validation_metrics(tags, 4)
    assert out["val-core/openai/gsm8k/acc/mean@4"] == pytest.approx((2 + 1 + 3) / 12)
    assert out["val-core/openai/gsm8k/acc/best@4"] == pytest.approx(3 / 3)
    assert out["val-core/openai/gsm8k/acc/maj@4"] == pytest.approx(2 / 3)


def test_math_rows_get_maj_at_4_over_normalised_boxes():
    tags = _scored_tags(
        "lighteval/MATH",
        # \dfrac{1}{2} and \frac{ 1 }{2} normalise alike: 2 votes against 0.5 and 3, right
        [
            (
                r"\frac{1}{2}",
                [r"\boxed{0.5}", r"\boxed{\dfrac{1}{2}}", r"\boxed{3}", r"$\boxed{\frac{ 1 }{2}}$"],
            )
        ],
    )
    out = validation_metrics(tags, 4)
    assert out["val-core/lighteval/MATH/acc/maj@4"] == 1.0
