"""An OpenEnv environment trained through main_ppo with the openenv agent loop (the shipped arithmetic
environment, in-process): its rewards are the trajectories' scores, its questions are masked context."""

from __future__ import annotations

import json
from collections import Counter

import pandas as pd
import pytest

from tests.trainer.helpers import dumped_generations, joining, train
from verl_lite.trainer.load import compose_config, load_ppo_config
from verl_lite.trainer.validation import ConfigError

ARR = "actor_rollout_ref"
# The shipped environment with a format bonus (0.25 for an answer with "####"; the tiny model seldom gets the
# sum right), logging each episode's return when the loop closes it (in the rollout's process).
LOGGED_ENV = """
import json

from verl_lite.configs.envs.arithmetic_env import ArithmeticEnvironment


class LoggedArithmetic(ArithmeticEnvironment):
    def __init__(self, log_path, **kwargs):
        super().__init__(**kwargs)
        self.log_path, self.rewards = log_path, []

    def step(self, action, timeout_s=None, **kwargs):
        observation = super().step(action)
        observation.reward += 0.25 if "####" in action.text else 0.0
        self.rewards.append(observation.reward)
        return observation

    def close(self):
        with open(self.log_path, "a") as f:
            f.write(json.dumps({"return": sum(self.rewards), "steps": len(self.rewards)}) + "\\n")
"""


def write_rows(path, count: int) -> str:
    rows = [
        {
            "data_source": "synthetic_arith",
            # the environment asks the questions; a row gives the instructions and its episode's seed
            "prompt": [{"role": "system", "content": "Solve each problem."}],
            "reward_model": {"style": "rule", "ground_truth": "0"},
            "extra_info": {"reset_kwargs": {"seed": seed}},
        }
        for seed in range(count)
    ]
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


def test_an_openenv_environment_trains_with_its_own_rewards_and_masked_observations(tmp_path, cluster):
    env_file, log = tmp_path / "logged_env.py", tmp_path / "episodes.jsonl"
    env_file.write_text(LOGGED_ENV)
    data = write_rows(tmp_path / "rows.parquet", 8)
    history = train(
        tmp_path,
        *joining(cluster),
        "trainer.total_training_steps=2",
        f"data.train_files={data}",
        f"data.val_files={data}",
        "data.max_response_length=128",
        f"{ARR}.rollout.agent.default_agent_loop=openenv",
        f"{ARR}.rollout.agent.openenv.env.path={env_file}",
        f"{ARR}.rollout.agent.openenv.env.name=LoggedArithmetic",
        f"+{ARR}.rollout.agent.openenv.env_kwargs.log_path={log}",
        f"+{ARR}.rollout.agent.openenv.env_kwargs.turns=2",
        f"trainer.rollout_data_dir={tmp_path / 'rollouts'}",
        f"trainer.validation_data_dir={tmp_path / 'validation'}",
    )
    steps = [h for h in history if "agent/env_steps/mean" in h]
    assert [h["step"] for h in steps] == [1, 2]
    for h in steps:
        # most episodes get to the follow-up question: answer, question (mask 0), answer
        assert h["agent/num_turns/max"] == 3 and h["agent/env_steps/mean"] > 1.2
        assert h["agent/env_errors/mean"] == 0.0
        # the stored tokens are the sampled ones and the questions are masked: a question's tokens carry
        # rollout log-prob 0.0, so with mask 1 the actor's probabilities would differ there by far more
        assert h["training/rollout_probs_diff_mean"] < 1e-4
    # every trajectory's score is the return of its episode, as the environment itself logged it
    episodes = [json.loads(line) for line in log.read_text().splitlines()]
    scores = [row["score"] for rows in dumped_generations(tmp_path / "rollouts").values() for row in rows]
    scores += [row["score"] for rows in dumped_generations(tmp_path / "validation").values() for row in rows]
    # 2 steps x 4 prompts x 4 samples, and the 8 validation episodes after training
    assert len(scores) == 40 and Counter(scores) == Counter(e["return"] for e in episodes)
    # returns no reward manager gives (it scores 0 or 1): the environment's, format bonus included
    assert any(0.0 < score < 1.0 for score in scores)


def test_a_class_that_is_not_an_openenv_environment_is_refused_before_ray_starts(tmp_path):
    cfg = compose_config(
        "ppo_trainer",
        [
            f"{ARR}.rollout.agent.default_agent_loop=openenv",
            f"{ARR}.rollout.agent.openenv.env.name=collections.Counter",
            "ray_kwargs.ray_init.num_cpus=8",
        ],
    )
    with pytest.raises(ConfigError, match=r"openenv.env.name='collections.Counter' is .* not an OpenEnv env"):
        load_ppo_config(cfg)
