"""Tool-call parsers: turn a model's generated text into tool calls, one registered parser per format.

A parser never raises on what the model wrote: a call it cannot read is returned as an error string, which
the agent loop counts (``tool_parse_errors``) and shows to the model as the call's result.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from verl_lite.utils.registry import Registry


@dataclass
class ToolCall:
    """One call the model asked for: the tool's name and its keyword arguments."""

    name: str
    arguments: dict[str, Any]


@dataclass
class ParsedToolCalls:
    """What a parser read from one assistant turn."""

    # Readable calls, in the order the model wrote them.
    calls: list[ToolCall] = field(default_factory=list)
    # The text with every call (readable or not) removed, stripped.
    text: str = ""
    # One sentence per call that could not be read (bad JSON, no name, arguments not an object, unclosed tag).
    errors: list[str] = field(default_factory=list)


# A parser: the assistant turn's decoded text -> its tool calls.
ToolParser = Callable[[str], ParsedToolCalls]

TOOL_PARSERS: Registry[ToolParser] = Registry("tool_parser")
register_tool_parser = TOOL_PARSERS.register
get_tool_parser = TOOL_PARSERS.get

_HERMES_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_HERMES_OPEN = "<tool_call>"


@register_tool_parser("hermes")
def parse_hermes(text: str) -> ParsedToolCalls:
    """Read ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (Hermes / Qwen2.5 format).

    ``arguments`` may also be a JSON string holding an object (some models write it that way). An opening
    tag without its closing tag (the turn ended inside a call) is an error; the text after it is dropped.
    """
    out = ParsedToolCalls()
    for body in _HERMES_CALL.findall(text):
        call = _read_call(body.strip())
        if isinstance(call, str):
            out.errors.append(call)
        else:
            out.calls.append(call)
    rest = _HERMES_CALL.sub("", text)
    if _HERMES_OPEN in rest:
        rest = rest[: rest.index(_HERMES_OPEN)]
        out.errors.append("a <tool_call> tag was opened but never closed with </tool_call>.")
    out.text = rest.strip()
    return out


def _read_call(body: str) -> ToolCall | str:
    """A ``ToolCall`` from one call's JSON, or the sentence saying why it cannot be read."""
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as err:
        return f"tool call {_clip(body)} is not valid JSON ({err.msg} at character {err.pos})."
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return f'tool call {_clip(body)} needs a "name" string, as {{"name": ..., "arguments": {{...}}}}.'
    arguments = obj.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass
    if not isinstance(arguments, dict):
        return f'tool call {_clip(body)} has "arguments" that is not a JSON object.'
    return ToolCall(obj["name"], arguments)


def _clip(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")
