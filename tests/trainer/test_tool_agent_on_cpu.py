"""Tool-calling trajectories through main_ppo: the tool agent, the calculator, the parser and the masks.

The policy is scripted (tests/trainer/scripted_tool_policy.py: one calculator call, then the answer it
returned; sample 0 of every prompt calls a tool that does not exist), so what is checked is the plumbing
around a model that calls tools: every other part of the run is the real one.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.trainer.helpers import joining, train
from verl_lite.workers.tools.chat_template import TOOL_CHAT_TEMPLATE

ARR = "actor_rollout_ref"
POLICY = Path(__file__).resolve().parent / "scripted_tool_policy.py"
PACKAGE = Path(__file__).resolve().parents[2] / "verl_lite"
CALCULATOR = PACKAGE / "configs" / "tools" / "calculator.yaml"
AGENT_MODEL = PACKAGE / "assets" / "tiny_agent_model"
TOOL_DATA = PACKAGE / "assets" / "synthetic_tools"
# Two steps of the calculator task's rows on its agent model, answered by the scripted policy through the
# tool agent loop.
SCRIPTED_CALCULATOR_RUN = [
    "trainer.total_training_steps=2",
    f"trainer.extensions=[{POLICY}]",
    f"{ARR}.model.path={AGENT_MODEL}",
    f"data.train_files={TOOL_DATA / 'train.parquet'}",
    "data.default_data_source=synthetic_calc",
    "data.max_prompt_length=96",
    f"{ARR}.rollout.name=scripted_calculator",
    f"{ARR}.rollout.agent.default_agent_loop=tool_agent",
]


def test_tool_agent_runs_the_calculator_and_trains_on_model_tokens_only(tmp_path, cluster):
    # the calculator task's rows (agent_name=tool_agent, data_source=synthetic_calc) and its agent model,
    # whose tokenizer carries the tools-capable chat template
    assert (AGENT_MODEL / "chat_template.jinja").read_text() == TOOL_CHAT_TEMPLATE
    history = train(
        tmp_path,
        *joining(cluster),
        *SCRIPTED_CALCULATOR_RUN,
        f"data.val_files={TOOL_DATA / 'val.parquet'}",
        f"{ARR}.rollout.multi_turn.tool_config_path={CALCULATOR}",
        f"{ARR}.rollout.multi_turn.format=hermes",
        f"{ARR}.rollout.multi_turn.max_assistant_turns=3",
        f"{ARR}.rollout.multi_turn.max_user_turns=2",
        f"{ARR}.rollout.multi_turn.max_parallel_calls=2",
        f"{ARR}.rollout.multi_turn.max_tool_response_length=64",
        f"{ARR}.rollout.multi_turn.tool_response_truncate_side=left",
        f"{ARR}.rollout.multi_turn.tool_timeout_s=5.0",
        "data.max_response_length=192",
        "algorithm.adv_estimator=rloo",
    )
    assert [h["step"] for h in history] == [1, 2]
    for h in history:
        # call, result, answer: three turns and one tool call per trajectory
        assert h["agent/num_turns/min"] == h["agent/num_turns/max"] == 3
        assert h["agent/tool_calls/mean"] == 1.0
        # the unknown tool is an error the model sees, never a failed step
        assert h["agent/tool_errors"] == 4  # sample 0 of each of the 4 prompts
        assert h["agent/tool_calls/calculator/mean"] == 1.0 and h["agent/tool_calls/abacus/mean"] == 1.0
        # the scripted policy's log-probs are the served model's; the actor agrees on the model tokens
        # (the tool-result tokens, which nobody sampled, are masked out of this check)
        assert h["training/rollout_probs_diff_mean"] < 1e-4
        # every scripted answer is the same (#### 42): the synthetic_calc scorer gives one score per
        # prompt, so RLOO's advantages (and the gradient) are 0
        assert h["critic/advantages/max"] == h["critic/advantages/min"] == 0.0 and "actor/pg_loss" in h
        assert "reward_extra/used_tool/mean" in h  # the synthetic_calc scorer's own metric
        assert h["kv/controller_bytes_read"] == 0


def test_a_sync_tool_that_never_returns_times_out_and_the_steps_finish(tmp_path, cluster):
    # every calculator call blocks its thread for good; with a 2 s timeout each one is an error the
    # model sees, and the loop's own work (scoring, storing) and the server's never wait for those threads
    tools = tmp_path / "hanging.yaml"
    tools.write_text("tools:\n  - class_name: tests.trainer.hanging_tool.hanging_calculator\n")
    start = time.monotonic()
    history = train(
        tmp_path,
        *joining(cluster),
        *SCRIPTED_CALCULATOR_RUN,
        "data.val_files=null",
        "data.max_response_length=128",
        f"{ARR}.rollout.agent.generate_timeout_s=120",  # a regression fails naming the rollout, never hangs
        f"{ARR}.rollout.multi_turn.tool_config_path={tools}",
        f"{ARR}.rollout.multi_turn.tool_timeout_s=2",
        "algorithm.adv_estimator=rloo",
    )
    print(f"\n2 steps with a hanging tool in {time.monotonic() - start:.1f} s")
    assert [h["step"] for h in history] == [1, 2]
    for h in history:
        # 12 calculator calls timed out (samples 1-3 of 4 prompts) and 4 calls of the unknown abacus
        assert h["agent/tool_errors"] == 16
        assert h["agent/tool_calls/calculator/mean"] == 1.0


def test_agent_tiny_config_calls_the_calculator_with_the_shipped_agent_model(tmp_path, cluster):
    # --config-name agent_tiny: the tool task, the agent model and the tool loop come from the config
    # alone; only the FAST sizes (and the response budget the tool turns need) are overridden
    history = train(
        tmp_path,
        *joining(cluster),
        "trainer.total_training_steps=2",
        "data.max_response_length=256",
        "trainer.val_before_train=true",
        config_name="agent_tiny",
    )
    assert [h["step"] for h in history if "step" in h][-2:] == [1, 2]
    steps = [h for h in history if "agent/tool_calls/mean" in h]
    assert len(steps) == 2
    for h in steps:
        # the SFT'd model calls the calculator on most problems (the products) and then answers:
        # a call turn, the tool's result, the answer
        assert h["agent/tool_calls/mean"] > 0.2
        assert h["agent/num_turns/max"] == 3
        assert h["reward_extra/used_tool/mean"] > 0.2
        assert h["training/rollout_probs_diff_mean"] < 1e-4
    # validation runs the tool loop greedily on the whole val split: the products it solves
    accuracies = [
        h["val-core/synthetic_calc/acc/mean@1"] for h in history if "val-core/synthetic_calc/acc/mean@1" in h
    ]
    assert len(accuracies) == 2 and 0.3 < accuracies[0] < 0.7
