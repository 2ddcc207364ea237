"""The OpenAI chat-completions request the endpoint accepts, read and checked field by field.

Every problem is a :class:`RequestError` that the endpoint answers as OpenAI does (``{"error": {"message",
"type", "param", "code"}}`` with a 4xx status), never an exception in the worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ROLES = ("system", "user", "assistant", "tool")
TOOL_CHOICES = ("auto", "none")
# OpenAI's limit on stop sequences.
MAX_STOP = 4


class RequestError(Exception):
    """A request the endpoint refuses: HTTP ``status``, the sentence, and the offending field."""

    def __init__(self, message: str, param: str | None = None, status: int = 400, code: str | None = None):
        super().__init__(message)
        self.message, self.param, self.status, self.code = message, param, status, code

    def body(self) -> dict[str, Any]:
        """The OpenAI error object."""
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


@dataclass
class ChatRequest:
    """What a chat-completions request asks for (None = the trajectory's configured value)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    parse_tool_calls: bool
    temperature: float | None
    top_p: float | None
    max_tokens: int | None
    stop: list[str]
    logprobs: bool


def parse_chat_request(body: Any) -> ChatRequest:
    """The :class:`ChatRequest` of a JSON body; :class:`RequestError` names the first bad field."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object.")
    if body.get("stream"):
        raise RequestError("stream=true is not supported; send stream=false.", "stream")
    n = body.get("n", 1)
    if n not in (1, None):
        raise RequestError(f"n={n!r} is not supported; each request samples one choice (n=1).", "n")
    tool_choice = body.get("tool_choice") or "auto"
    if tool_choice not in TOOL_CHOICES:
        raise RequestError(
            f"tool_choice={tool_choice!r} is not supported; use one of {', '.join(TOOL_CHOICES)}.",
            "tool_choice",
        )
    top_logprobs = body.get("top_logprobs")
    if top_logprobs not in (None, 0):
        raise RequestError(
            "top_logprobs is not supported; the sampled token's log-prob comes back.", "top_logprobs"
        )
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and not _is_int(max_tokens, 1):
        raise RequestError(f"max_tokens={max_tokens!r} must be a positive integer.", "max_tokens")
    return ChatRequest(
        messages=_messages(body.get("messages")),
        tools=_tools(body.get("tools")),
        parse_tool_calls=tool_choice != "none",
        temperature=_number(body, "temperature", 0.0, 2.0),
        top_p=_number(body, "top_p", 0.0, 1.0, low_open=True),
        max_tokens=max_tokens,
        stop=_stop(body.get("stop")),
        logprobs=bool(body.get("logprobs")),
    )


def _messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list of message objects.", "messages")
    out = []
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            role = message.get("role") if isinstance(message, dict) else None
            raise RequestError(f"{param}.role={role!r} must be one of {', '.join(ROLES)}.", f"{param}.role")
        content = _text(message.get("content"), f"{param}.content")
        clean = {"role": message["role"], "content": content}
        if message["role"] == "assistant" and message.get("tool_calls"):
            clean["tool_calls"] = _tool_calls(message["tool_calls"], f"{param}.tool_calls")
        elif content is None:
            raise RequestError(f"{param}.content is missing.", f"{param}.content")
        if message["role"] == "tool":
            clean["tool_call_id"] = str(message.get("tool_call_id") or "")
        out.append(clean)
    return out


def _text(content: Any, param: str) -> str | None:
    """A message's content: a string, or the text parts of a content list joined."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    raise RequestError(f"{param} must be a string or a list of text parts (no images or audio).", param)


def _tool_calls(calls: Any, param: str) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise RequestError(f"{param} must be a list.", param)
    out = []
    for i, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise RequestError(f"{param}[{i}] needs function.name and function.arguments.", f"{param}[{i}]")
        out.append({"id": call.get("id"), "type": "function", "function": function})
    return out


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise RequestError("tools must be a list of function tools.", "tools")
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if tool.get("type") != "function" or not isinstance(function, dict) or not function.get("name"):
            raise RequestError(
                f'tools[{i}] must be {{"type": "function", "function": {{"name": ..., "parameters": ...}}}}.',
                f"tools[{i}]",
            )
    return tools or None


def _stop(stop: Any) -> list[str]:
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if (
        not isinstance(stops, list)
        or not all(isinstance(s, str) and s for s in stops)
        or len(stops) > MAX_STOP
    ):
        raise RequestError(
            f"stop must be a string or a list of at most {MAX_STOP} non-empty strings.", "stop"
        )
    return stops


def _number(body: dict, name: str, low: float, high: float, low_open: bool = False) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    bad = isinstance(value, bool) or not isinstance(value, int | float)
    if bad or value > high or value < low or (low_open and value == low):
        bound = "(" if low_open else "["
        raise RequestError(f"{name}={value!r} must be a number in {bound}{low:g}, {high:g}].", name)
    return float(value)


def _is_int(value: Any, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


__all__ = ["ChatRequest", "RequestError", "parse_chat_request"]
