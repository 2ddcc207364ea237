"""The multi-agent task callbacks and config checks, without Ray or a model."""

import pytest

from verl_lite.trainer.multi_agent import MAGRPOConfig, RewardProcessors
from verl_lite.trainer.multi_agent.callbacks import (
    agent_formatters,
    eval_due,
    format_prompt,
    joint_rewards,
)


def test_eval_schedule_runs_before_each_epoch_then_on_the_interval_and_never_at_zero():
    # 6 tasks per epoch, 2 epochs, interval 4: before tasks 0, 4 (epoch 1), 6 (epoch 2 starts), 8 (done=8)
    due = [done for done in range(12) if eval_due(done, done % 6, 4)]
    assert due == [0, 4, 6, 8]
    assert not any(eval_due(done, done % 6, 0) for done in range(12))


def test_reward_gets_batch_items_only_when_it_takes_them_and_the_processor_scales():
    item = {"prompt": "p", "target": 2}

    def with_items(a, b, *, batch_items):
        return [len(x) + len(y) + batch_items[0]["target"] for x, y in zip(a, b)]

    def without(a, b):
        return [len(x) * len(y) for x, y in zip(a, b)]

    # ("ab", "c") -> 2 + 1 + 2 = 5; scaled by 10 -> 50
    assert joint_rewards(with_items, [["ab"], ["c"]], [item], RewardProcessors.scale(10.0)) == [50.0]
    assert joint_rewards(without, [["ab", "a"], ["c", "cc"]], [item]) == [2.0, 2.0]
    with pytest.raises(ValueError, match="returned 2 rewards for one joint answer"):
        joint_rewards(lambda a, b: [0.0, 1.0], [["x", "y"], ["x", "y"]], [item])


def test_reward_is_called_once_per_joint_answer_as_comlrl_does():
    # CoMLRL's documented rewards read a[0] and return one value (or a bare number)
    calls = []

    def first_only(a, b):
        calls.append((a, b))
        return [len(b[0]) - len(a[0])]

    assert joint_rewards(first_only, [["a", "bb"], ["ccc", "d"]], [{}]) == [2.0, -1.0]
    assert calls == [(["a"], ["ccc"]), (["bb"], ["d"])]
    assert joint_rewards(lambda a, b: 0.5, [["x", "y"], ["x", "y"]], [{}]) == [0.5, 0.5]


def test_unknown_joint_modes_and_discounts_outside_0_1_are_refused():
    with pytest.raises(ValueError, match="joint_mode is 'diagonal'; use one of aligned, cross"):
        MAGRPOConfig(num_turns=1, joint_mode="diagonal")
    with pytest.raises(ValueError, match=r"MAGRPOConfig.discount is 1.5; it must lie in \[0, 1\]"):
        MAGRPOConfig(num_turns=2, discount=1.5)


def test_formatters_are_shared_or_one_per_agent_and_get_external_prompts_when_they_take_them():
    item = {"prompt": "Tell a story."}
    shared = agent_formatters(None, 3)
    assert [f(item) for f in shared] == ["Tell a story."] * 3
    with pytest.raises(ValueError, match="formatters has 1 entries for num_agents=2"):
        agent_formatters([lambda it: ""], 2)

    def revise(it, external_prompts=None):
        return it["prompt"] + (f" Revise: {external_prompts}" if external_prompts else "")

    assert format_prompt(revise, item) == "Tell a story."
    assert format_prompt(revise, item, "too long") == "Tell a story. Revise: too long"
    assert format_prompt(lambda it: it["prompt"], item, "fb") == "Tell a story.\nfb"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_generations": 1}, "num_generations is 1; group baselines need at least 2"),
        ({"eval_interval": -1}, "eval_interval is -1; use 0"),
        ({"num_agents": 0}, "num_agents is 0; it must be a positive integer"),
        ({"eval_num_samples": 0}, "eval_num_samples is 0"),
    ],
)
def test_bad_config_values_are_refused_naming_key_and_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MAGRPOConfig(**kwargs)


def test_magrpo_mode_without_a_reward_file_is_refused_before_ray_starts(tmp_path):
    from verl_lite.trainer.load import compose_config, load_ppo_config
    from verl_lite.trainer.validation import ConfigError

    with pytest.raises(ConfigError, match=r"needs multi_agent.reward_function.path \(got null\)"):
        load_ppo_config(compose_config("ppo_trainer", ["trainer.mode=magrpo"]))
    missing = tmp_path / "nope.py"
    with pytest.raises(ConfigError, match=r"multi_agent.formatters\[0\].path='.*nope.py' is not a file"):
        load_ppo_config(
            compose_config(
                "ppo_trainer",
                [
                    "trainer.mode=magrpo",
                    f"multi_agent.reward_function.path={__file__}",
                    f"multi_agent.formatters=[{{path:{missing},name:f}}]",
                ],
            )
        )
    reward = [f"multi_agent.reward_function.path={__file__}"]
    with pytest.raises(
        ConfigError, match=r"trainer.mode='iac' trains a critic: set algorithm.adv_estimator=gae"
    ):
        load_ppo_config(compose_config("ppo_trainer", ["trainer.mode=iac", *reward]))
    with pytest.raises(ConfigError, match=r"multi_agent.agents\[0\].model='/elsewhere' differs from"):
        load_ppo_config(
            compose_config(
                "ppo_trainer", ["trainer.mode=magrpo", *reward, "multi_agent.agents=[{model:/elsewhere},{}]"]
            )
        )
    with pytest.raises(
        ValueError, match="multi_agent.agents lists 1 agents for num_agents=2; give 2 entries"
    ):
        load_ppo_config(
            compose_config("ppo_trainer", ["trainer.mode=magrpo", *reward, "multi_agent.agents=[{}]"])
        )
    with pytest.raises(ValueError, match=r"multi_agent.discount is 2; it must lie in \[0, 1\]"):
        load_ppo_config(
            compose_config(
                "ppo_trainer", ["trainer.mode=magrpo", "multi_agent.num_turns=2", "multi_agent.discount=2"]
            )
        )


def test_trainer_arguments_are_checked_at_construction_and_evaluate_without_eval_set_is_empty():
    from verl_lite.trainer.multi_agent import MAGRPOTrainer

    tasks = [{"prompt": "p"}]
    trainer = MAGRPOTrainer(reward_func=lambda a, b: [0.0] * len(a), train_dataset=tasks)
    assert trainer.evaluate(num_eval_samples=3) == {}  # no eval_dataset: nothing starts, nothing is returned
    with pytest.raises(ValueError, match="eval_logger and eval_aggregator go together"):
        MAGRPOTrainer(reward_func=lambda a, b: [], train_dataset=tasks, eval_logger=lambda **kw: [])
    with pytest.raises(ValueError, match="agents lists 3 models for num_agents=2"):
        MAGRPOTrainer(agent_model=["a", "b", "c"], reward_func=lambda a, b: [], train_dataset=tasks)
