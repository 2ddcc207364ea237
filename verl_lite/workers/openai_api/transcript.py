"""Token-exact transcripts of one trajectory's chat requests: which tokens were sampled, which were rendered.

An agent talks to the endpoint in whole conversations: every request carries all its messages. The
transcript keeps, per **segment**, the token ids the model saw and sampled, and decides for each request:

* it **extends** a segment when its messages start with that segment's messages (the ones sent plus the
  assistant answer given) and add at least one: the new tokens are the segment's ids so far plus the
  chat template's tokens of the new messages only (mask 0), then the sampled ids (mask 1). The model's
  own earlier answers are never re-tokenized, so an agent that sends them back with other whitespace
  (assistant content is compared with runs of whitespace collapsed) still extends the segment;
* otherwise it **starts a new segment** (a sub-agent's call, an edited or truncated history, other
  tools), rendered whole from its messages.

Which segment becomes the training trajectory is the agent loop's rule (``openai_agent``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from verl_lite.workers.tools.rendering import ChatRenderer
from verl_lite.workers.turns import TurnRecord

# A message as the transcript compares them: role, content, tool calls (name, arguments JSON), call id.
MessageKey = tuple[str, str, tuple[tuple[str, str], ...], str]


@dataclass
class Segment(TurnRecord):
    """One token-exact conversation: the prompt of its first request and everything after it (user turns
    are the requests that extended it, each appending messages between two assistant turns)."""

    # The tool schemas its requests carried (rendered into the prompt), as canonical JSON.
    tools_key: str = ""
    # The messages answered so far, ending with the assistant answer the endpoint returned.
    messages: list[MessageKey] = field(default_factory=list)
    finish_reason: str = "stop"
    # A generation for it is in flight: requests that would extend it start their own segment.
    busy: bool = False


def message_key(message: dict[str, Any]) -> MessageKey:
    """What decides whether two messages are the same turn (assistant content up to whitespace)."""
    role = message["role"]
    content = message.get("content") or ""
    if role == "assistant":
        content = " ".join(content.split())
    calls = tuple(
        (call["function"]["name"], _canonical_arguments(call["function"].get("arguments")))
        for call in message.get("tool_calls") or []
    )
    return role, content, calls, message.get("tool_call_id") or ""


def tools_key(tools: list[dict[str, Any]] | None) -> str:
    """Canonical JSON of a request's tool schemas."""
    return json.dumps(tools or [], sort_keys=True)


class Transcript:
    """The segments of one trajectory's requests (see the module docstring).

    Args:
        renderer: the chat template of the policy.
    """

    def __init__(self, renderer: ChatRenderer):
        self.renderer = renderer
        self.segments: list[Segment] = []
        # The segment of the latest request, in the order requests arrived.
        self.last: Segment | None = None

    def context_for(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> tuple[Segment, list[int], bool]:
        """The segment ``messages`` extend (or a new one), the ids to append to it before generating, and
        whether it is new. The segment is marked busy until :meth:`answered` or :meth:`released`."""
        keys, tkey = [message_key(m) for m in messages], tools_key(tools)
        for segment in reversed(self.segments):
            n = len(segment.messages)
            if (
                not segment.busy
                and segment.tools_key == tkey
                and n < len(keys)
                and keys[:n] == segment.messages
            ):
                segment.busy = True
                return segment, self.renderer.appended_ids(messages[n:]), False
        segment = Segment(self.renderer.prompt_ids(messages, tools), tools_key=tkey, busy=True)
        return segment, [], True

    def answered(
        self,
        segment: Segment,
        is_new: bool,
        messages: list[dict[str, Any]],
        appended: list[int],
        sampled: list[int],
        log_probs: list[float],
        versions: list[int],
        answer: dict[str, Any],
        finish_reason: str,
    ) -> None:
        """Record a generation: ``appended`` (mask 0) then ``sampled`` (mask 1) on ``segment``, whose
        messages become ``messages`` + the ``answer`` returned."""
        if is_new:
            self.segments.append(segment)
        else:
            segment.user_turns += 1
        segment.add(appended, None, mask=0)
        segment.add(sampled, log_probs, mask=1)
        segment.messages = [message_key(m) for m in messages] + [message_key(answer)]
        segment.versions += versions
        segment.assistant_turns += 1
        segment.finish_reason = finish_reason
        segment.busy = False
        self.last = segment

    @staticmethod
    def released(segment: Segment) -> None:
        """A request on ``segment`` ended without a generation: it takes requests again."""
        segment.busy = False


def _canonical_arguments(arguments: Any) -> str:
    """Tool-call arguments as canonical JSON (a JSON string is parsed first; unreadable text is kept)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return json.dumps(arguments, sort_keys=True)


__all__ = ["Segment", "Transcript", "message_key", "tools_key"]
