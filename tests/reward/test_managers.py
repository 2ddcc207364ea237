"""Reward managers: naive, dapo (overlong penalty), batch; error capture; processors; the registry."""

import logging

import pytest

from verl_lite.reward import (
    DAPORewardManager,
    NaiveRewardManager,
    RewardConfig,
    RewardItem,
    RewardManager,
    compute_overlong_penalty,
    get_reward_manager_cls,
    register_reward_manager,
)

LOGGER = "verl_lite.reward.managers.base"


def item(response="#### 7", ground_truth="7", data_source="synthetic_arith", length=10, budget=100, **row):
    return RewardItem(
        data_source=data_source,
        prompt="<|user|>q<|end|><|assistant|>",
        response=response,
        ground_truth=ground_truth,
        extra_info={"index": 0},
        response_length=length,
        max_response_length=budget,
        row=row,
    )


def test_naive_scores_each_item_with_the_builtin_scorer():
    results = NaiveRewardManager(RewardConfig())(
        [item("#### 7"), item("#### 8"), item(r"\boxed{2}", "2", "math")]
    )
    assert [r.score for r in results] == [1.0, 0.0, 1.0]
    assert results[0].extra == {"acc": 1.0, "pred": "7"} and results[0].error is None


def test_naive_passes_reward_kwargs_to_the_scorer():
    config = RewardConfig(reward_kwargs={"format_score": 0.1})
    assert NaiveRewardManager(config)([item("#### 8")])[0].score == 0.1


@pytest.mark.parametrize(
    ("length", "factor", "expected"),
    [
        (50, 1.0, 0.0),  # below max - buffer = 100 - 20 = 80: no penalty (min(0, +1.5))
        (80, 1.0, 0.0),  # exactly at the buffer start
        (90, 1.0, -0.5),  # -(90 - 80) / 20 * 1.0
        (100, 1.0, -1.0),  # -(100 - 80) / 20
        (95, 0.5, -0.375),  # -(95 - 80) / 20 * 0.5
    ],
)
def test_overlong_penalty_is_linear_in_the_buffer(length, factor, expected):
    assert compute_overlong_penalty(length, 100, 20, factor) == pytest.approx(expected)


def test_dapo_adds_penalty_to_the_score_and_reports_it():
    config = RewardConfig.from_any({"reward_manager": "dapo", "overlong_buffer": {"enable": True, "len": 20}})
    results = DAPORewardManager(config)([item(length=90), item(length=50), item("#### 8", length=100)])
    # correct 1.0 - 0.5; correct 1.0 + 0; wrong 0.0 - 1.0
    assert [r.score for r in results] == pytest.approx([0.5, 1.0, -1.0])
    assert results[0].extra == {"acc": 1.0, "pred": "7", "overlong_reward": -0.5, "overlong": 1.0}
    assert results[1].extra["overlong"] == 0.0


def test_dapo_without_buffer_equals_naive():
    results = DAPORewardManager(RewardConfig(reward_manager="dapo"))([item(length=100)])
    assert results[0].score == 1.0 and "overlong_reward" not in results[0].extra


def test_dapo_needs_the_response_budget():
    config = RewardConfig.from_any({"overlong_buffer": {"enable": True, "len": 20}})
    with pytest.raises(ValueError, match="max_response_length"):
        DAPORewardManager(config)([item(budget=0)])


def test_raising_scorer_is_recorded_and_each_message_logged_once(caplog):
    def flaky(data_source, solution_str, ground_truth, extra_info):
        if solution_str == "boom":
            raise RuntimeError("verifier down")
        if solution_str == "bad":
            raise KeyError("answer")
        return 1.0

    manager = NaiveRewardManager(RewardConfig(), flaky)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        results = manager([item("boom"), item("ok"), item("boom"), item("bad"), item("boom")])
        results += manager([item("boom")])  # a later call does not log it again either
    assert [r.score for r in results] == [None, 1.0, None, None, None, None]
    assert results[0].error == "RuntimeError: verifier down"
    assert results[3].error == "KeyError: 'answer'"
    logged = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(logged) == 2  # two distinct messages
    assert "RuntimeError: verifier down" in logged[0] and "KeyError: 'answer'" in logged[1]


def test_bad_return_values_become_errors():
    values = iter([{"acc": 1.0}, "n/a", float("nan")])
    manager = NaiveRewardManager(RewardConfig(), lambda **kw: next(values))
    errors = [r.error for r in manager([item(), item(), item()])]
    assert errors[0].startswith("ValueError: reward function returned a dict without 'score'")
    assert errors[1].startswith("TypeError: reward function returned str 'n/a'")
    assert errors[2] == "ValueError: reward function returned NaN."


def test_processors_scale_then_clip_the_final_score():
    config = RewardConfig.from_any(
        {
            "reward_manager": "dapo",
            "overlong_buffer": {"enable": True, "len": 20},
            "processors": {"scale": 10.0, "clip_min": -5.0, "clip_max": 8.0},
        }
    )
    results = DAPORewardManager(config)([item(length=50), item(length=90), item("#### 8", length=100)])
    # 1.0*10 -> clip 8; (1 - 0.5)*10 = 5; (0 - 1)*10 = -10 -> clip -5
    assert [r.score for r in results] == [8.0, 5.0, -5.0]


def test_processors_leave_failed_items_without_score():
    def boom(**kwargs):
        raise ValueError("x")

    config = RewardConfig.from_any({"processors": {"scale": 2.0}})
    assert NaiveRewardManager(config, boom)([item()])[0].score is None


def test_batch_manager_calls_the_function_once_with_batch_items():
    calls = []

    def judge(batch_items, bonus=0.0):
        calls.append(batch_items)
        return [
            {"score": float(b["completion"] == b["ground_truth"]) + bonus, "n": len(batch_items)}
            for b in batch_items
        ]

    manager = get_reward_manager_cls("batch")(
        RewardConfig(reward_manager="batch", reward_kwargs={"bonus": 0.5}), judge
    )
    results = manager([item("7", target=3), item("8", target=4)])
    assert len(calls) == 1 and [r.score for r in results] == [1.5, 0.5] and results[0].extra == {"n": 2}
    first = calls[0][0]
    assert first["completion"] == first["solution_str"] == "7" and first["target"] == 3
    assert first["row"] == {"target": 3} and first["data_source"] == "synthetic_arith"


def test_batch_manager_records_a_failed_call_on_every_item(caplog):
    def short(batch_items):
        return [1.0]

    manager = get_reward_manager_cls("batch")(RewardConfig(), short)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        results = manager([item(), item(), item()])
    assert {r.error for r in results} == {"ValueError: batch reward function returned 1 scores for 3 items"}
    assert len([r for r in caplog.records if r.name == LOGGER]) == 1


def test_batch_comlrl_style_receives_completions_positionally():
    def reward_func(completions, *, batch_items):
        return [float(len(c) == 1) for c in completions]

    manager = get_reward_manager_cls("batch")(RewardConfig(), reward_func)
    assert [r.score for r in manager([item("a"), item("bb")])] == [1.0, 0.0]


def test_managers_refuse_the_other_calling_form():
    with pytest.raises(ValueError, match="reward_manager=batch"):
        NaiveRewardManager(RewardConfig(), lambda batch_items: [])
    with pytest.raises(ValueError, match="batch_items"):
        get_reward_manager_cls("batch")(RewardConfig(), None)


def test_registry_lists_builtin_managers_and_accepts_new_ones():
    with pytest.raises(KeyError, match="batch, dapo, naive"):
        get_reward_manager_cls("nope")

    @register_reward_manager("test_constant")
    class ConstantManager(RewardManager):
        def score(self, items):
            from verl_lite.reward import RewardResult

            return [RewardResult(score=2.0) for _ in items]

    assert get_reward_manager_cls("test_constant") is ConstantManager
    config = RewardConfig.from_any({"processors": {"scale": 0.5}})
    assert ConstantManager(config)([item()])[0].score == 1.0


def test_model_scores_replace_the_rule_scores_by_default():
    manager = NaiveRewardManager({"processors": {"scale": 2.0}})
    # replace (verl's behaviour): 2 * rm score; the rule scores are ignored
    assert manager.combine_model_scores([1.0, 0.0], [0.5, -1.5]) == [1.0, -3.0]


def test_model_scores_add_to_the_rule_scores():
    manager = NaiveRewardManager({"reward_model": {"combine": "add"}, "processors": {"clip_max": 1.0}})
    # add: rule + clip(rm, max 1): 1 + 0.5, 0 + 1
    assert manager.combine_model_scores([1.0, 0.0], [0.5, 3.0]) == [1.5, 1.0]
    with pytest.raises(ValueError, match="combine=add needs one rule-based score per response"):
        manager.combine_model_scores(None, [0.5])
