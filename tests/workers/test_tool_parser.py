"""The hermes tool-call parser: calls, the text around them, and unreadable calls as errors (never raises)."""

from __future__ import annotations

import pytest

from verl_lite.workers.tools import TOOL_PARSERS, ToolCall, get_tool_parser

parse = get_tool_parser("hermes")


def test_well_formed_call_is_read_and_removed_from_the_text():
    out = parse('<tool_call>{"name": "calculator", "arguments": {"expression": "3+4"}}</tool_call>')
    assert out.calls == [ToolCall("calculator", {"expression": "3+4"})]
    assert out.text == "" and out.errors == []


def test_text_around_calls_is_kept_and_several_calls_keep_their_order():
    out = parse(
        'Let me compute. <tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call> and '
        '<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call> done'
    )
    assert out.calls == [ToolCall("a", {"x": 1}), ToolCall("b", {})]
    assert out.text == "Let me compute.  and  done"


def test_arguments_may_be_a_json_string_or_absent():
    out = parse(
        '<tool_call>{"name": "a", "arguments": "{\\"x\\": 2}"}</tool_call><tool_call>{"name": "b"}</tool_call>'
    )
    assert out.calls == [ToolCall("a", {"x": 2}), ToolCall("b", {})]


@pytest.mark.parametrize(
    "body, message",
    [
        ('{"name": "a", "arguments": {', "is not valid JSON"),
        ('{"arguments": {}}', 'needs a "name" string'),
        ('["a"]', 'needs a "name" string'),
        ('{"name": "a", "arguments": [1]}', '"arguments" that is not a JSON object'),
    ],
)
def test_malformed_call_is_an_error_not_an_exception(body, message):
    out = parse(
        f'ok <tool_call>{body}</tool_call><tool_call>{{"name": "good", "arguments": {{}}}}</tool_call>'
    )
    assert out.calls == [ToolCall("good", {})]
    assert len(out.errors) == 1 and message in out.errors[0]
    assert out.text == "ok"


def test_unclosed_call_is_an_error_and_its_text_is_dropped():
    out = parse('Answer <tool_call>{"name": "a", "arguments": {}}')
    assert out.calls == [] and out.text == "Answer"
    assert out.errors == ["a <tool_call> tag was opened but never closed with </tool_call>."]


def test_text_without_calls_has_no_calls_and_no_errors():
    out = parse("The answer is 7.")
    assert out.calls == [] and out.errors == [] and out.text == "The answer is 7."


def test_unknown_parser_name_lists_the_known_ones():
    assert "hermes" in TOOL_PARSERS
    with pytest.raises(KeyError, match="unknown tool_parser 'json'; known: hermes"):
        get_tool_parser("json")
