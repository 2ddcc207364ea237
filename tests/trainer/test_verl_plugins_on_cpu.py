"""A verl user's tool, interaction, yaml files and data rows, trained through main_ppo unchanged.

The tool and interaction classes (tests/trainer/verl_style_plugins.py) follow verl's signatures; the
tool and interaction yaml files are in verl's formats; the rows have verl's preprocess layout
(``reward_model.ground_truth``, ``extra_info.tools_kwargs``, ``extra_info.interaction_kwargs``,
``agent_name``, here a loop declared in an ``agent_loop_config_path`` yaml). The policy is scripted (tests/trainer/scripted_tool_policy.py: one calculator call,
then ``#### <its result>``, 42; sample 0 of every prompt first calls a tool that does not exist), so
what is checked is everything around the model, down to the stored token ids and masks: they are
compared with the chat template's rendering of each conversation (tests/trainer/trajectory_recorder.py
keeps what the actor trained on).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.trainer.helpers import joining, train
from verl_lite.trajectory import parse_trajectory_key

ARR = "actor_rollout_ref"
HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parents[1] / "verl_lite"
POLICY = HERE / "scripted_tool_policy.py"
RECORDER = HERE / "trajectory_recorder.py"
MODEL = PACKAGE / "assets" / "tiny_agent_model"
RESPONSE_LENGTH = 320
PLUGINS = "tests.trainer.verl_style_plugins"

TOOLS_YAML = f"""\
tools:
  - class_name: {PLUGINS}.VerlStyleCalculator
    config:
      type: native
    tool_schema:
      type: function
      function:
        name: calculator
        description: Evaluate an arithmetic expression.
        parameters:
          type: object
          properties:
            expression:
              type: string
              description: e.g. 3 * (4 + 5)
          required: [expression]
"""
AGENT_LOOPS_YAML = f"""\
- name: verl_style_tool_agent
  _target_: {PLUGINS}.VerlStyleToolAgent
"""
INTERACTIONS_YAML = f"""\
interaction:
  - name: gsm8k
    class_name: {PLUGINS}.VerlStyleGsm8kInteraction
    config: {{}}
"""


def verl_rows(n: int) -> pd.DataFrame:
    """n rows in the layout of verl's GSM8K multi-turn preprocess script; every other answer is 42."""
    rows = []
    for i in range(n):
        question = f"Question {i}: what is 6*7, or one less?"
        answer = "42" if i % 2 == 0 else "41"
        rows.append(
            {
                "data_source": "gsm8k",
                "prompt": [{"role": "user", "content": question}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": answer},
                "extra_info": {
                    "split": "train",
                    "index": i,
                    "question": question,
                    "tools_kwargs": {"calculator": {"create_kwargs": {"ground_truth": answer}}},
                    "interaction_kwargs": {"name": "gsm8k", "query": question, "ground_truth": answer},
                },
                "agent_name": "verl_style_tool_agent",
            }
        )
    return pd.DataFrame(rows)


def test_verl_tool_and_interaction_train_from_verls_yaml_and_rows(tmp_path, cluster):
    verl_rows(16).to_parquet(tmp_path / "train.parquet")
    (tmp_path / "tools.yaml").write_text(TOOLS_YAML)
    (tmp_path / "interactions.yaml").write_text(INTERACTIONS_YAML)
    (tmp_path / "agent_loops.yaml").write_text(AGENT_LOOPS_YAML)
    history = train(
        tmp_path,
        *joining(cluster),
        "trainer.total_training_steps=2",
        f"trainer.extensions=[{POLICY},{RECORDER}]",
        "trainer.mode=sync_recording",  # sync, keeping each step's stored ids and masks (trajectory_recorder.py)
        f"{ARR}.model.path={MODEL}",
        f"data.train_files={tmp_path / 'train.parquet'}",
        "data.val_files=null",
        "data.shuffle=false",
        "data.max_prompt_length=96",
        f"data.max_response_length={RESPONSE_LENGTH}",
        f"{ARR}.rollout.name=scripted_calculator",
        # verl's multi-turn keys
        f"{ARR}.rollout.multi_turn.enable=true",
        f"{ARR}.rollout.multi_turn.tool_config_path={tmp_path / 'tools.yaml'}",
        f"{ARR}.rollout.multi_turn.interaction_config_path={tmp_path / 'interactions.yaml'}",
        f"{ARR}.rollout.multi_turn.max_user_turns=3",
        f"{ARR}.rollout.agent.agent_loop_config_path={tmp_path / 'agent_loops.yaml'}",
        f"custom_reward_function.path={HERE / 'verl_style_plugins.py'}",
        "custom_reward_function.name=interaction_score",
        "algorithm.adv_estimator=grpo",
    )
    assert [h["step"] for h in history] == [1, 2]
    for h in history:
        # 2 prompts answer 42 (samples 1-3 call the calculator, answer 42 and the interaction ends the
        # episode with score 1), 2 answer 41 (every answer is wrong, asked again until max_user_turns);
        # the score is the interaction's alone: 6 of 16 trajectories, calc_reward not added on top
        assert h["critic/score/mean"] == 6 / 16
        assert h["agent/tool_reward/mean"] == 6 / 16 and h["reward_extra/tool_reward_seen/mean"] == 6 / 16
        # execute's reward (0.1 per matching call) averages over the 12 trajectories that called it
        assert abs(h["agent/tool_step_reward/mean"] - 0.1 * 6 / 12) < 1e-9
        assert h["agent/num_turns/min"] == 3  # call, tool result, answer: the interaction ended it
        assert h["agent/num_turns/max"] == 7  # 4 answers, 1 tool turn and 2 interaction turns
        # one interaction turn in the 6 right episodes, two (then the limit) in the other 10; the reward
        # function saw one turn score per interaction turn
        assert (
            h["agent/interaction_turns/mean"] == h["reward_extra/turns_scored/mean"] == (6 * 1 + 10 * 2) / 16
        )
        # the served model's log-probs of the model tokens equal the actor's: observation tokens (tool
        # results and interaction turns, mask 0) are where the chat template puts them
        assert h["training/rollout_probs_diff_mean"] < 1e-4
    for step in (1, 2):
        stored = json.loads((tmp_path / "trajectories" / f"{step}.json").read_text())
        assert_ids_and_masks_are_the_templates(stored, verl_rows(16))


# The scripted policy's turns (scripted_tool_policy.py), the tool's results and the interaction's reply
# (verl_style_plugins.py), as chat messages.
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'
BAD_CALL = '<tool_call>{"name": "abacus", "arguments": {"expression": "1+1"}}</tool_call>'
UNKNOWN_TOOL = "Error: unknown tool 'abacus'; available: calculator."  # the tool agent's error text
TRY_AGAIN = "Your response is incorrect! You need to reflect on your answer and try again."


def expected_conversation(question: str, answer: str, sample: int) -> list[dict]:
    """The whole conversation of one trajectory: sample 0 calls the unknown tool, the others the
    calculator (42); the model then answers ``#### <tool result>``; the interaction ends a right answer's
    episode and asks again after a wrong one, until the third user turn (max_user_turns=3)."""
    call, result = (BAD_CALL, UNKNOWN_TOOL) if sample == 0 else (CALL, "42")
    messages = [
        {"role": "user", "content": question},
        {"role": "assistant", "content": call},
        {"role": "tool", "content": result},
        {"role": "assistant", "content": f"#### {result}"},
    ]
    if result != answer:
        for _ in range(2):
            messages += [
                {"role": "user", "content": TRY_AGAIN},
                {"role": "assistant", "content": f"#### {result}"},
            ]
    return messages


def assert_ids_and_masks_are_the_templates(stored: dict[str, dict], rows: pd.DataFrame) -> None:
    """Each stored trajectory is its conversation as the model's chat template renders it, and its
    response_mask is 1 exactly on the assistant turns' tokens (what the model sampled after the template's
    generation prompt, through its EOS) and 0 on the tool results, the interaction's turns and the
    generation prompts between them.

    An assistant message's tokens are told apart by rendering prefixes of the conversation: they run
    from the end of the conversation before it (with the generation prompt) to the end of the
    conversation through it."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    tools = [entry["tool_schema"] for entry in yaml.safe_load(TOOLS_YAML)["tools"]]

    def render(messages: list[dict], add_generation_prompt: bool) -> list[int]:
        return list(
            tokenizer.apply_chat_template(
                messages, tools=tools, add_generation_prompt=add_generation_prompt, return_dict=False
            )
        )

    row_of_prompt = {tuple(render(list(row.prompt), True)): row for row in rows.itertuples()}
    assert len(stored) == 16  # 4 prompts x 4 samples
    for key, traj in stored.items():
        row = row_of_prompt[tuple(traj["prompts"])]  # KeyError: the prompt is not the template's
        messages = expected_conversation(
            row.prompt[0]["content"], row.reward_model["ground_truth"], sample=parse_trajectory_key(key)[1]
        )
        full = render(messages, add_generation_prompt=False)
        end = len(traj["prompts"]) + RESPONSE_LENGTH  # sample 0's 7 turns pass it: the loop stops there
        assert traj["prompts"] + traj["responses"] == full[:end], key
        mask = [0] * len(full)
        for j, message in enumerate(messages):
            if message["role"] == "assistant":
                before = render(messages[:j], add_generation_prompt=True)
                through = render(messages[: j + 1], add_generation_prompt=False)
                assert full[: len(before)] == before and full[: len(through)] == through
                mask[len(before) : len(through)] = [1] * (len(through) - len(before))
        assert traj["response_mask"] == mask[len(traj["prompts"]) : end], key
        assert sum(traj["response_mask"]) < len(traj["response_mask"])  # observations are there, masked 0


def test_agent_loop_yaml_names_reach_the_agent_name_check_before_ray(tmp_path):
    from verl_lite.trainer.load import compose_config, load_ppo_config

    rows = verl_rows(4).assign(agent_name="loop_from_yaml_only")  # a name no other test registers
    rows.to_parquet(tmp_path / "train.parquet")
    key = f"{ARR}.rollout.agent.agent_loop_config_path"
    base = [f"data.train_files={tmp_path / 'train.parquet'}", "data.val_files=null"]
    with pytest.raises(ValueError, match="agent_name='loop_from_yaml_only', which is not"):
        load_ppo_config(compose_config("ppo_trainer", base))
    (tmp_path / "loops.yaml").write_text(
        AGENT_LOOPS_YAML.replace("verl_style_tool_agent", "loop_from_yaml_only")
    )
    config = load_ppo_config(compose_config("ppo_trainer", [*base, f"{key}={tmp_path / 'loops.yaml'}"]))
    assert config.actor_rollout_ref.rollout.agent.agent_loop_config_path == str(tmp_path / "loops.yaml")
    (tmp_path / "bad.yaml").write_text("- name: x\n  _target_: json.dumps\n")
    with pytest.raises(ValueError, match=r"entry 0: json.dumps is not an AgentLoop subclass"):
        load_ppo_config(compose_config("ppo_trainer", [*base, f"{key}={tmp_path / 'bad.yaml'}"]))
