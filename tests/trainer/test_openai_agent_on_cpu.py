"""The openai_agent loop through main_ppo: the calculator task's agent written with the OpenAI client.

``--config-name openai_agent_tiny`` trains the shipped agent model through the OpenAI-compatible endpoint
(one base URL per trajectory, token-exact transcripts; tests/workers/test_openai_endpoint_on_cpu.py checks
the tokens). Here: the run's own metrics, and the agent's faults counted without failing a step.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.helpers import STANDALONE, joining, train
from verl_lite.trainer.load import compose_config, load_ppo_config
from verl_lite.trainer.validation import ConfigError

ARR = "actor_rollout_ref"
PACKAGE = Path(__file__).resolve().parents[2] / "verl_lite"
CALCULATOR_AGENT = PACKAGE / "configs" / "agents" / "calculator_openai.py"
FLAKY_AGENT = '''
import itertools

from verl_lite.configs.agents.calculator_openai import agent as calculator

CALLS = itertools.count()


async def agent(client, row):
    """The calculator agent, except that every 4th run in a process raises after its first request."""
    if next(CALLS) % 4 == 0:
        await client.chat.completions.create(model="m", messages=list(row["messages"]), max_tokens=4)
        raise RuntimeError("a bug in the agent")
    return await calculator(client, row)
'''


def test_openai_agent_tiny_trains_the_calculator_agent_and_counts_agent_failures(tmp_path, cluster):
    flaky = tmp_path / "flaky_agent.py"
    flaky.write_text(FLAKY_AGENT)
    history = train(
        tmp_path,
        *joining(cluster),
        "trainer.total_training_steps=2",
        "data.max_response_length=256",
        "data.agent_name=openai_agent",
        f"{ARR}.rollout.agent.default_agent_loop=openai_agent",
        f"{ARR}.rollout.agent.openai.function.path={flaky}",
        f"{ARR}.rollout.agent.openai.function.name=agent",
        f"{ARR}.rollout.agent.openai.timeout_s=60",
        "trainer.val_before_train=true",
        config_name="openai_agent_tiny",
    )
    steps = [h for h in history if "agent/openai_requests/mean" in h]
    assert [h["step"] for h in steps] == [1, 2]
    for h in steps:
        # the SFT'd model calls the calculator through the agent's tools= on most problems: a call, the
        # tool's result (a role "tool" message), the answer
        assert h["agent/num_turns/max"] == 3 and h["agent/openai_requests/mean"] > 1.2
        assert h["reward_extra/used_tool/mean"] > 0.2
        # the stored tokens are the sampled ones: the actor scores them as the server did
        assert h["training/rollout_probs_diff_mean"] < 1e-4
        # one conversation per trajectory: nothing starts a second segment
        assert h["agent/openai_segments/mean"] == 1.0
        # the agent's bug on every 4th run is a counted failure, never a failed step
        assert 0.0 < h["agent/agent_errors/mean"] < 1.0 and h["agent/agent_timeouts/mean"] == 0.0
    accuracies = [
        h["val-core/synthetic_calc/acc/mean@1"] for h in history if "val-core/synthetic_calc/acc/mean@1" in h
    ]
    assert len(accuracies) == 2 and accuracies[0] > 0.2


def test_an_agent_that_is_not_async_is_refused_before_ray_starts(tmp_path):
    sync = tmp_path / "sync_agent.py"
    sync.write_text("def agent(client, row):\n    return 1.0\n")
    cfg = compose_config(
        "openai_agent_tiny",
        [f"{ARR}.rollout.agent.openai.function.path={sync}", "ray_kwargs.ray_init.num_cpus=8"],
    )
    with pytest.raises(
        ConfigError, match=r"agent.openai.function.name='agent' in .* is not an async function"
    ):
        load_ppo_config(cfg)
    with pytest.raises(ConfigError, match=r"agent.openai.function: no such file"):
        load_ppo_config(
            compose_config("openai_agent_tiny", [f"{ARR}.rollout.agent.openai.function.path=/nope.py"])
        )


def test_openai_agent_runs_in_standalone_agent_loop_workers(tmp_path, cluster):
    # the endpoint starts on each agent-loop worker actor's own event loop (two workers, two servers)
    history = train(
        tmp_path,
        *joining(cluster),
        *STANDALONE,
        "trainer.total_training_steps=1",
        "data.max_response_length=256",
        f"{ARR}.rollout.agent.openai.function.path={CALCULATOR_AGENT}",
        config_name="openai_agent_tiny",
    )
    [step] = [h for h in history if "agent/openai_requests/mean" in h]
    assert step["agent/openai_requests/mean"] > 1.2 and step["agent/agent_errors/mean"] == 0.0
    assert step["training/rollout_probs_diff_mean"] < 1e-4
