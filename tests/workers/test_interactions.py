"""Interactions in the tool agent loop: verl's BaseInteraction contract, masks, per-turn scores, turn limits."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.workers.test_agent_loops import (
    CALC,
    ScriptedClient,
    check_invariants,
    make_loop,
    render_ids,
    run,
    template_mask,
)
from verl_lite.trainer.validation import EMBEDDED_MODEL
from verl_lite.workers.interactions import InteractionConfigError, load_interactions
from verl_lite.workers.interactions.gsm8k import Gsm8kInteraction, gsm8k_answer

GSM8K_YAML = Path(__file__).resolve().parents[2] / "verl_lite" / "configs" / "interactions" / "gsm8k.yaml"
USER = {"role": "user", "content": "What is 6*7?"}
WRONG = "Your answer is wrong. Please check your work and try again."


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(EMBEDDED_MODEL)


class RecordingInteraction:
    """Written against verl's BaseInteraction signatures (no verl_lite base class): ends the episode on
    the second answer and records every call."""

    def __init__(self, config):
        self.config, self.name, self.calls = config, config["name"], []

    async def start_interaction(self, instance_id=None, **kwargs):
        self.calls.append(("start", kwargs))
        return "episode-1"

    async def generate_response(self, instance_id, messages, **kwargs):
        self.calls.append(("respond", instance_id, [m["content"] for m in messages]))
        answers = sum(m["role"] == "assistant" for m in messages)
        return answers >= 2, f"answer {answers} noted", 0.25 * answers, {"answers": answers}

    async def calculate_score(self):
        return 0.0

    async def finalize_interaction(self, instance_id=None, **kwargs):
        self.calls.append(("finalize", instance_id))


def _loop(tok, interaction, **multi_turn):
    loop = make_loop(tok, **multi_turn)
    loop.context.interactions = {interaction.name: interaction}
    return loop


def _row(**kwargs):
    return {"prompt_ids": [9], "messages": [USER], "extra_info": {"interaction_kwargs": kwargs}}


def test_interaction_answers_are_user_turns_with_mask_0_and_end_the_episode(tok):
    interaction = RecordingInteraction({"name": "judge"})
    client = ScriptedClient(tok, ["#### 41", "#### 42", "never asked"])
    out = run(_loop(tok, interaction), _row(name="judge", ground_truth="42"), client)
    conversation = [
        USER,
        {"role": "assistant", "content": "#### 41"},
        {"role": "user", "content": "answer 1 noted"},
        {"role": "assistant", "content": "#### 42"},
    ]
    # the episode ended on the second answer: two generations, the interaction's turn in between
    assert len(client.calls) == 2 and out.finish_reason == "stop"
    assert out.prompt_ids + out.response_ids == render_ids(tok, conversation, [CALC])
    assert [0] * len(out.prompt_ids) + out.response_mask == template_mask(tok, conversation, [CALC])
    assert out.turn_scores == [0.25, 0.5] and out.metrics["interaction_turns"] == 2
    assert out.metrics["interaction/answers"] == 1.5 and out.num_turns == 3
    assert interaction.calls[0] == ("start", {"name": "judge", "ground_truth": "42"})
    assert interaction.calls[1] == ("respond", "episode-1", ["What is 6*7?", "#### 41"])
    assert interaction.calls[-1] == ("finalize", "episode-1")
    check_invariants(out, 400)


def test_max_user_turns_bounds_the_interaction_turns(tok):
    interaction = RecordingInteraction({"name": "judge"})
    client = ScriptedClient(tok, ["#### 1", "#### 2", "#### 3"])
    out = run(_loop(tok, interaction, max_user_turns=0), _row(name="judge"), client)
    assert len(client.calls) == 1 and out.finish_reason == "max_user_turns" and out.turn_scores == []


def test_gsm8k_interaction_lets_the_model_retry_until_it_is_right(tok):
    [gsm8k] = load_interactions(str(GSM8K_YAML)).values()
    assert isinstance(gsm8k, Gsm8kInteraction) and gsm8k.name == "gsm8k"
    client = ScriptedClient(tok, ["#### 41", "#### 4,2", "unused"])
    out = run(_loop(tok, gsm8k, max_assistant_turns=5), _row(name="gsm8k", ground_truth="42"), client)
    assert out.turn_scores == [0.0, 1.0] and out.finish_reason == "stop"
    assert WRONG in tok.decode(out.response_ids)
    assert gsm8k._episodes == {}  # finalized


def test_gsm8k_answer_reads_the_last_number_after_hashes():
    assert gsm8k_answer("so #### 1,234.") == "1234"
    assert gsm8k_answer("#### 3 then #### -7") == "-7" and gsm8k_answer("no answer") is None


def test_unknown_interaction_name_is_one_sentence_naming_it(tok):
    loop = _loop(tok, RecordingInteraction({"name": "judge"}))
    with pytest.raises(ValueError, match=r"interaction_kwargs.name='coach' is not in .*; known: judge\."):
        run(loop, _row(name="coach"), ScriptedClient(tok, ["x"]))


def test_bad_interaction_yaml_names_file_and_entry(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("interaction:\n  - name: x\n    class_name: json.dumps\n")
    with pytest.raises(
        InteractionConfigError, match=r"interaction\[0\]: json.dumps is not an interaction class"
    ):
        load_interactions(str(path))


def test_a_bad_interaction_config_path_is_refused_before_ray(tmp_path):
    from verl_lite.trainer.load import compose_config, load_ppo_config

    key = "actor_rollout_ref.rollout.multi_turn.interaction_config_path"
    with pytest.raises(ValueError, match=f"{key}: interaction config {tmp_path} is not a file"):
        load_ppo_config(compose_config("ppo_trainer", [f"{key}={tmp_path}"]))
