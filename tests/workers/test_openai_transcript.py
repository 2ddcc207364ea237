"""Transcripts: which requests extend a segment, and the ids appended for their new messages.

The tokenizer and chat template are the shipped agent model's; the "sampled" ids are the template's own
rendering of an assistant turn, so each expected id list is a rendering of the whole conversation.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from verl_lite.workers.openai_api.transcript import Transcript
from verl_lite.workers.tools.rendering import ChatRenderer

AGENT_MODEL = str(Path(__file__).resolve().parents[2] / "verl_lite" / "assets" / "tiny_agent_model")
USER = {"role": "user", "content": "What is 2+3?"}
CALL = {"type": "function", "function": {"name": "calculator", "arguments": '{"expression": "2+3"}'}}
TOOLS = [
    {"type": "function", "function": {"name": "calculator", "parameters": {"properties": {"expression": {}}}}}
]


@pytest.fixture(scope="module")
def renderer():
    from transformers import AutoTokenizer

    return ChatRenderer(AutoTokenizer.from_pretrained(AGENT_MODEL))


def answer(transcript, messages, text, tools=None, reply=None):
    """Record a turn whose sampled ids are ``text`` + EOS, answered as ``reply`` (default: the text);
    returns (segment, appended, is_new, sampled)."""
    segment, appended, is_new = transcript.context_for(messages, tools)
    tok = transcript.renderer.tokenizer
    sampled = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
    reply = reply or {"role": "assistant", "content": text}
    transcript.answered(
        segment, is_new, messages, appended, sampled, [-0.5] * len(sampled), [3, 3], reply, "stop"
    )
    return segment, appended, is_new, sampled


def test_a_tool_result_extends_the_segment_with_the_templates_tokens_only(renderer):
    t = Transcript(renderer)
    call_reply = {"role": "assistant", "content": None, "tool_calls": [CALL]}
    text = '<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>'
    seg, _, is_new, first = answer(t, [USER], text, TOOLS, reply=call_reply)
    # the agent sends the call back with its arguments re-serialised (other spacing) and the tool's result
    resent = {"type": "function", "function": {"name": "calculator", "arguments": '{ "expression":"2+3" }'}}
    messages = [
        USER,
        {"role": "assistant", "content": "", "tool_calls": [resent]},
        {"role": "tool", "content": "5"},
    ]
    same, appended, is_new_2, second = answer(t, messages, "#### 5", TOOLS)
    assert is_new and not is_new_2 and same is seg and len(t.segments) == 1
    assert appended == renderer.encode("<|user|><tool_response>5</tool_response><|end|><|assistant|>")
    assert seg.response_ids == first + appended + second
    assert seg.response_mask == [1] * len(first) + [0] * len(appended) + [1] * len(second)
    assert seg.log_probs == [-0.5] * len(first) + [0.0] * len(appended) + [-0.5] * len(second)
    assert (seg.assistant_turns, seg.user_turns) == (2, 1)


def test_whitespace_changes_in_the_models_text_still_extend(renderer):
    t = Transcript(renderer)
    answer(t, [USER], "It is 5.")
    messages = [USER, {"role": "assistant", "content": "  It is\n5. "}, {"role": "user", "content": "Sure?"}]
    _, _, is_new = t.context_for(messages, None)
    assert not is_new


def test_edited_history_other_tools_or_a_repeat_start_new_segments(renderer):
    t = Transcript(renderer)
    answer(t, [USER], "It is 5.")
    follow = {"role": "user", "content": "Sure?"}
    for messages, tools in [
        ([USER, {"role": "assistant", "content": "It is 6."}, follow], None),  # the answer was edited
        ([USER, {"role": "assistant", "content": "It is 5."}, follow], TOOLS),  # tools changed
        ([USER], None),  # the same request again: a second sample, not a continuation
    ]:
        segment, appended, is_new = t.context_for(messages, tools)
        assert is_new and appended == [] and segment.prompt_ids == renderer.prompt_ids(messages, tools)
        t.released(segment)


def test_a_segment_with_a_generation_in_flight_is_not_extended_twice(renderer):
    t = Transcript(renderer)
    answer(t, [USER], "It is 5.")
    messages = [USER, {"role": "assistant", "content": "It is 5."}, {"role": "user", "content": "Sure?"}]
    first, _, first_new = t.context_for(messages, None)
    second, _, second_new = t.context_for(messages, None)
    assert not first_new and second_new and second is not first
