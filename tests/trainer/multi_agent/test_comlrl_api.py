"""CoMLRL 1.4's public names on verl_lite's multi-agent API: config fields and defaults, trainer arguments,
the multi-turn transition contract, the return baselines; one MAReMax run with CoMLRL's call shape."""

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from tests.conftest import start_local_ray
from verl_lite.algorithms import joint_return_advantage
from verl_lite.trainer.multi_agent import (
    IACConfig,
    IACTrainer,
    MAACConfig,
    MAGRPOConfig,
    MAGRPOTrainer,
    MAREINFORCEConfig,
    MAReMaxConfig,
    MAReMaxTrainer,
    MARLOOConfig,
    RewardProcessors,
)
from verl_lite.trainer.multi_agent.api import agent_ppo_config
from verl_lite.trainer.multi_agent.loop import Agent, MultiAgentLoop, TaskFunctions

# CoMLRL 1.4.3's MAGRPOConfig fields and defaults
COMLRL_MAGRPO = {
    "num_train_epochs": 20,
    "agent_learning_rate": 5.0e-6,
    "logging_steps": 50,
    "num_agents": 2,
    "parallel_training": "none",
    "agent_devices": None,
    "num_generations": 4,
    "max_new_tokens": 256,
    "temperature": 0.6,
    "top_p": 0.6,
    "top_k": 50,
    "num_turns": 2,
    "discount": 1.0,
    "joint_mode": "aligned",
    "early_termination_threshold": -0.2,
    "external_prompt_passthrough": False,
    "eval_interval": 16,
    "eval_num_samples": 4,
    "eval_batch_size": 1,
    "rollout_buffer_size": 2,
    "train_batch_size": 2,
    "advantage_normalization": True,
    "advantage_mode": "mean",
    "reference_kl_enabled": False,
    "reference_kl_coef": 0.1,
    "reference_devices": None,
}
COMLRL_IAC_ONLY = {
    "critic_learning_rate": 5.0e-6,
    "value_clip_range": 0.2,
    "value_loss_coef": 0.6,
    "use_separate_critic": True,
    "critic_type": "v",
    "critic_value_head_hidden_dim": None,
    "value_head_hidden_dim": None,
    "critic_devices": None,
    "num_generations": 1,
    "rollout_buffer_size": 8,
    "train_batch_size": 8,
    "num_train_epochs": 40,
    "logging_steps": 1,
    "top_k": None,
}


def test_configs_take_comlrl_field_names_with_its_defaults():
    magrpo, iac = MAGRPOConfig(), IACConfig()
    assert {k: getattr(magrpo, k) for k in COMLRL_MAGRPO} == COMLRL_MAGRPO
    assert {k: getattr(iac, k) for k in COMLRL_IAC_ONLY} == COMLRL_IAC_ONLY
    maac_fields = {f.name for f in dataclasses.fields(MAACConfig)}
    # CoMLRL's MAAC has one centralised critic model: no value heads on the actors to choose
    assert "rollout_buffer_size" in maac_fields and "use_separate_critic" not in maac_fields
    modes = [c(num_turns=1).advantage_mode for c in (MAREINFORCEConfig, MAReMaxConfig, MARLOOConfig)]
    assert modes == ["raw", "max", "rloo"]


@pytest.mark.parametrize(
    ("cls", "kwargs", "message"),
    [
        (MAGRPOConfig, {"advantage_mode": "median"}, "advantage_mode is 'median'; use one of mean, max"),
        (MAGRPOConfig, {"rollout_buffer_size": 0}, "MAGRPOConfig.rollout_buffer_size is 0; it must be a"),
        (MAGRPOConfig, {"train_batch_size": 0}, "MAGRPOConfig.train_batch_size is 0; it must be a"),
        (MAGRPOConfig, {"top_k": 0}, "top_k is 0; use a positive integer or None"),
        (MAGRPOConfig, {"parallel_training": "ddp"}, "parallel_training is 'ddp'; use 'none' or 'mp'"),
        (IACConfig, {"critic_type": "q"}, "IACConfig.critic_type is 'q'; .* only 'v' is valid"),
        (IACConfig, {"critic_value_head_hidden_dim": 64}, "critic_value_head_hidden_dim is 64; .* only None"),
    ],
)
def test_values_verl_lite_does_not_build_are_refused_naming_field_and_value(cls, kwargs, message):
    with pytest.raises(ValueError, match=message):
        cls(num_turns=1, **kwargs)


def test_device_arguments_are_accepted_with_one_notice():
    with pytest.warns(UserWarning, match="agent_devices, reference_devices ignored; Ray places"):
        MAGRPOConfig(num_turns=1, agent_devices=["cuda:0", "cuda:1"], reference_devices="cuda:0")


def test_return_baselines_follow_advantage_mode_and_normalisation():
    returns = torch.tensor([[1.0], [2.0], [3.0], [6.0]])
    mask, group = torch.ones_like(returns), ["task"] * 4

    def adv(mode, normalize=False):
        return joint_return_advantage(returns, mask, group, mode, normalize)[0][:, 0].tolist()

    assert adv("mean") == [-2.0, -1.0, 0.0, 3.0]
    assert adv("max") == [-5.0, -4.0, -3.0, 0.0]
    assert adv("rloo") == pytest.approx([1 - 11 / 3, 2 - 10 / 3, 3 - 3.0, 6 - 2.0])
    assert adv("raw") == [1.0, 2.0, 3.0, 6.0]
    # standardised, every baseline gives the same advantages (population std of [-2, -1, 0, 3] = sqrt(3.5))
    assert adv("max", True) == pytest.approx([v / 3.5**0.5 for v in (-2.0, -1.0, 0.0, 3.0)])


def test_comlrl_settings_reach_each_agents_verl_lite_config():
    args = MAReMaxConfig(num_turns=1, top_k=7, reference_kl_enabled=True, reference_kl_coef=0.05)
    config = agent_ppo_config(args, None, 1, "joint_return")
    algorithm = config.algorithm
    assert (algorithm.return_baseline, algorithm.use_kl_in_reward, algorithm.kl_penalty) == (
        "max",
        True,
        "low_var_kl",
    )
    assert algorithm.kl_ctrl.kl_coef == 0.05 and config.use_reference
    arr = config.actor_rollout_ref
    assert arr.rollout.top_k == 7 and arr.actor.optim.lr == 5.0e-6
    critic = agent_ppo_config(IACConfig(num_turns=1, critic_learning_rate=3e-4), None, 1, "gae").critic
    # CoMLRL clips only a value head on the actor: its separate critic's update is unclipped
    assert critic.critic.optim.lr == 3e-4 and critic.critic.cliprange_value is None


def test_trainers_take_comlrl_arguments():
    def reward(a, b):
        return [0.0] * len(a)

    tasks = [{"prompt": "p"}]
    args = MAGRPOConfig(num_turns=1)
    trainer = MAGRPOTrainer(agents=["m0", "m1", "m2"], reward_func=reward, train_dataset=tasks, args=args)
    assert trainer.args.num_agents == 3 and trainer.models == ["m0", "m1", "m2"]
    assert trainer.estimator == "joint_return"
    with pytest.warns(UserWarning, match=r"model_config keys \['torch_dtype'\] ignored"):
        MAGRPOTrainer(
            agent_model="m",
            reward_func=reward,
            train_dataset=tasks,
            args=args,
            model_config={"torch_dtype": "bf16"},
        )
    iac = IACTrainer(
        agent_model="m",
        critic_model="c",
        reward_func=reward,
        train_dataset=tasks,
        args=IACConfig(num_turns=1),
    )
    assert iac.critic_paths == ["c", "c"] and iac.estimator == "gae" and iac.args.num_generations == 1
    with pytest.raises(ValueError, match="got both agent_model and agents"):
        MAGRPOTrainer(agent_model="m", agents=["a", "b"], reward_func=reward, train_dataset=tasks, args=args)
    with pytest.raises(
        ValueError, match="IACTrainer got args of type MAGRPOConfig; pass a ActorCriticConfig"
    ):
        IACTrainer(reward_func=reward, train_dataset=tasks, args=args)
    assert RewardProcessors.shift(-1.0)(3.0) == 2.0 and RewardProcessors.scale()(3.0) == 3.0


def test_loaded_models_are_read_from_their_folder_with_a_notice():
    # CoMLRL's quick start passes agents=[AutoModelForCausalLM.from_pretrained(name), ...]
    loaded = type("Loaded", (), {"name_or_path": "/models/tiny"})()
    tasks = [{"prompt": "p"}]
    args = MAGRPOConfig(num_turns=1)
    with pytest.warns(UserWarning, match=r"read from their name_or_path \(\['/models/tiny'\]\)"):
        trainer = MAGRPOTrainer(agents=[loaded, loaded], reward_func=max, train_dataset=tasks, args=args)
    assert trainer.models == ["/models/tiny", "/models/tiny"]
    with pytest.raises(ValueError, match="agents entry object has no name_or_path; pass its folder"):
        MAGRPOTrainer(agents=[object(), object()], reward_func=max, train_dataset=tasks, args=args)


def test_external_transition_gets_comlrl_keywords_and_the_history():
    seen = []

    def transition(
        *, prompt, agent_completions, num_agents, prompt_history_per_agent, response_history_per_agent
    ):
        seen.append(
            (prompt, agent_completions, num_agents, prompt_history_per_agent, response_history_per_agent)
        )
        return [f"revise {a}" for a in agent_completions]

    agents = [Agent(None, None, None, lambda item: item["prompt"]) for _ in range(2)]
    args = MAGRPOConfig(num_turns=3, external_prompt_passthrough=True)
    loop = MultiAgentLoop(args, agents, None, TaskFunctions(lambda a, b: [], external_transition=transition))
    first = loop.transition({"prompt": "task"}, ([["p0"], ["p1"]], [["a0"], ["a1"]]), ["a0", "a1"])
    history = ([["p0", first[0]], ["p1", first[1]]], [["a0", "b0"], ["a1", "b1"]])
    second = loop.transition({"prompt": "task"}, history, ["b0", "b1"])
    assert second == ["revise b0", "revise b1"]
    assert seen[1] == (
        "task",
        ["b0", "b1"],
        2,
        [["p0", "revise a0"], ["p1", "revise a1"]],
        [["a0", "b0"], ["a1", "b1"]],
    )
    # passthrough: the external prompt is the whole prompt; without it, it follows the formatter's text
    assert loop.prompt(agents[0], {"prompt": "task"}, "revise b0") == "revise b0"
    loop.args = MAGRPOConfig(num_turns=3)
    assert loop.prompt(agents[0], {"prompt": "task"}, "revise b0") == "task\nrevise b0"
    with pytest.raises(
        ValueError, match="external_transition returned 'x'; return a list of one prompt per agent"
    ):
        MultiAgentLoop(
            args, agents, None, TaskFunctions(None, external_transition=lambda **kw: "x")
        ).transition({"prompt": "t"}, ([["p"], ["q"]], [["a"], ["b"]]), ["a", "b"])


@pytest.fixture(scope="module")
def remax_run(tmp_path_factory):
    """CoMLRL's MAReMax call shape (two turns, a transition, passthrough), 1 task x 2 joint samples."""
    start_local_ray()
    calls = []

    def reward_func(first, second):
        # always >= 1: without a baseline every advantage would be positive
        return [1.0 + min(len(b), 40) / 40 + min(len(a), 40) / 80 for a, b in zip(first, second)]

    def external_transition(
        *, prompt, agent_completions, num_agents, prompt_history_per_agent, response_history_per_agent
    ):
        calls.append(len(response_history_per_agent[0]))
        return [f"Improve on: {c[:8]!r}" for c in agent_completions]

    args = MAReMaxConfig(
        num_agents=2,
        num_turns=2,
        num_train_epochs=1,
        num_generations=2,
        max_new_tokens=6,
        agent_learning_rate=1e-4,
        advantage_normalization=False,
        external_prompt_passthrough=True,
        early_termination_threshold=None,  # rewards >= 1 would cut every tree after turn 1
        eval_interval=0,
        eval_num_samples=1,
        logging_steps=1,
        output_dir=str(tmp_path_factory.mktemp("remax")),
    )
    tasks = [{"prompt": "Name a colour."}]
    with MAReMaxTrainer(
        agent_model=None,
        num_agents=2,
        reward_func=reward_func,
        formatters=lambda item: item["prompt"],
        external_transition=external_transition,
        train_dataset=tasks,
        eval_dataset=tasks,
        args=args,
    ) as trainer:
        history = trainer.train()
        evaluation = trainer.evaluate()
    return history, evaluation, calls, args


def test_maremax_trains_with_the_max_baseline_and_passes_transition_prompts_through(remax_run):
    history, evaluation, calls, args = remax_run
    [step] = history
    for k in (0, 1):  # A = R - max(R) <= 0 although every reward is >= 1
        assert step[f"policy_{k}/critic/advantages/max"] <= 1e-6
        assert step[f"policy_{k}/critic/score/min"] >= 1.0
    assert step["turn_2/reward_min"] >= 1.0
    # once per joint answer of turn 1 in training (2), once in evaluation (one path)
    assert calls == [1, 1, 1]
    # CoMLRL's evaluation names; one item, so turn 1's return is both turns' rewards
    assert set(evaluation) == {
        f"eval/turn_{k}/{m}" for k in (1, 2) for m in ("reward_mean", "expected_return")
    }
    assert evaluation["eval/turn_2/expected_return"] == evaluation["eval/turn_2/reward_mean"]
    assert evaluation["eval/turn_1/expected_return"] == pytest.approx(
        evaluation["eval/turn_1/reward_mean"] + evaluation["eval/turn_2/reward_mean"]
    )
    # evaluate() after training: 2 + 2 x 2 joint rewards
    record = json.loads((Path(args.output_dir) / "eval" / "env_step_6.json").read_text())
    first, second = record["prompts"][0][0]  # agent 0, task 0: turn 1 and turn 2
    # passed through: the transition's text alone, without the formatter's
    assert first == "Name a colour." and second.startswith("Improve on: ")


def test_cross_mode_trains_each_agent_on_the_sum_over_its_answers_combinations(tmp_path):
    start_local_ray()
    calls = []

    def reward_func(first, second):
        calls.append((first[0], second[0]))
        return [min(len(second[0]), 30) / 30 - min(len(first[0]), 30) / 60]

    args = MAGRPOConfig(
        num_agents=2,
        num_turns=1,
        joint_mode="cross",
        num_train_epochs=1,
        num_generations=2,
        max_new_tokens=6,
        agent_learning_rate=1e-4,
        eval_interval=0,
        logging_steps=1,
        rollout_buffer_size=1,  # an update per task
        output_dir=str(tmp_path),
    )
    tasks = [{"prompt": "Name a colour."}, {"prompt": "Name a fruit."}]
    with MAGRPOTrainer(
        agent_model=None, num_agents=2, reward_func=reward_func, train_dataset=tasks, args=args
    ) as trainer:
        history = trainer.train()
    # per task, 2 x 2 combinations each scored once; env_step counts them
    assert len(calls) == 2 * 4 and [h["env_step"] for h in history] == [4, 8]
    for step in history:
        # an agent's 2 answers are each in 2 of the 4 combinations: the mean of its returns (its trajectories'
        # scores) is twice the mean joint reward
        for k in (0, 1):
            assert step[f"policy_{k}/critic/score/mean"] == pytest.approx(
                2 * step["turn_1/reward_mean"], abs=1e-5
            )


def test_shared_actor_critic_puts_a_value_head_on_each_actor_with_comlrls_loss_weight():
    args = IACConfig(num_turns=1, use_separate_critic=False, value_head_hidden_dim=32, value_clip_range=0.3)
    config = agent_ppo_config(args, None, 1, "gae")
    head = config.actor_rollout_ref.actor.value_head
    # CoMLRL weighs its squared error by value_loss_coef; verl_lite's value loss is half the squared error
    assert (head.enable, head.hidden_dim, head.loss_coef, head.cliprange_value) == (True, 32, 1.2, 0.3)
    assert not config.use_critic  # no critic workers: the head is the critic
    unclipped = IACConfig(num_turns=1, use_separate_critic=False, value_clip_range=None)
    assert (
        agent_ppo_config(unclipped, None, 1, "gae").actor_rollout_ref.actor.value_head.cliprange_value is None
    )
    with pytest.warns(UserWarning, match="value_head_hidden_dim .* has no effect"):
        IACConfig(num_turns=1, value_head_hidden_dim=32)
    with pytest.warns(
        UserWarning, match="MAACConfig.value_loss_coef=0.5 only rescales a separate critic's loss"
    ):
        MAACConfig(num_turns=1, value_loss_coef=0.5)
