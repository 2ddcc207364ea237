"""``ChatSession``: one trajectory's chat completions, generated on its sticky rollout server and recorded.

A request becomes token ids through the trajectory's :class:`Transcript` (the sampled ids of earlier turns
kept, only new messages rendered), goes to the rollout server through the trajectory's client, and its
answer comes back in OpenAI's format: the text, and the tool calls the registered parser
(``multi_turn.format``) reads in it as ``tool_calls``. The limits of ``rollout.multi_turn`` and the
response budget hold per trajectory: past them a request is answered at once with ``finish_reason
"length"`` and no tokens, so an agent's loop ends as it would at a model's length limit.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from verl_lite.workers.config import RolloutConfig, SamplingConfig
from verl_lite.workers.openai_api.schema import ChatRequest, RequestError
from verl_lite.workers.openai_api.transcript import Transcript
from verl_lite.workers.tools.parsers import get_tool_parser
from verl_lite.workers.tools.rendering import ChatRenderer

if TYPE_CHECKING:  # the agent loops import this package
    from verl_lite.workers.agent_loop.base import ServerClient

# The id /v1/models lists: the one policy every trajectory samples from (any model name is accepted).
MODEL_ID = "verl-lite-policy"


class ChatSession:
    """Serves one trajectory's requests (see the module docstring).

    Args:
        renderer: the policy's chat template.
        client: the trajectory's sticky rollout-server client.
        sampling: the trajectory's sampling (training or validation); a request's temperature / top_p
            replace it.
        config: the rollout config (``response_length``, ``prompt_length``, ``multi_turn``).
    """

    def __init__(
        self, renderer: ChatRenderer, client: ServerClient, sampling: SamplingConfig, config: RolloutConfig
    ):
        self.renderer, self.tokenizer = renderer, renderer.tokenizer
        self.client, self.sampling, self.config = client, sampling, config
        self.parse = get_tool_parser(config.multi_turn.format)
        self.transcript = Transcript(renderer)
        # openai_requests, openai_generations, tool_parse_errors (the loop's metrics).
        self.counts: Counter = Counter()
        # An error of ours (not the request's) that ended a request, e.g. no rollout server left: the
        # agent saw a 500, and the loop raises this after the agent returns.
        self.fatal: BaseException | None = None

    async def complete(self, request: ChatRequest) -> dict[str, Any]:
        """The OpenAI ``chat.completion`` object answering ``request``."""
        self.counts["openai_requests"] += 1
        segment, appended, is_new = self.transcript.context_for(request.messages, request.tools)
        out = None
        try:
            context = segment.prompt_ids + segment.response_ids + appended
            if is_new and len(segment.prompt_ids) > self.config.prompt_length:
                raise RequestError(
                    f"the messages are {len(segment.prompt_ids)} tokens; this model takes at most "
                    f"{self.config.prompt_length} (rollout.prompt_length).",
                    "messages",
                    code="context_length_exceeded",
                )
            room = self._room(segment, appended, request)
            if room > 0:
                out = await self.client.generate(context, self._sampling(request), room)
        finally:
            if out is None:  # nothing to record (a limit, a refusal, an error): it takes requests again
                self.transcript.released(segment)
        if out is None:
            empty = {"role": "assistant", "content": ""}
            return self._answer_message(empty, len(context), [], [], "length", request)
        sampled, log_probs, reason = self._cut_at_stop(list(out.token_ids), list(out.log_probs), request.stop)
        reason = reason or out.finish_reason
        answer = self._message(sampled, request)
        if answer.get("tool_calls") and reason == "stop":
            reason = "tool_calls"
        self.transcript.answered(
            segment,
            is_new,
            request.messages,
            appended,
            sampled,
            log_probs,
            [out.min_weight_version, out.weight_version],
            answer,
            "length" if reason == "length" else "stop",
        )
        self.counts["openai_generations"] += 1
        return self._answer_message(answer, len(context), sampled, log_probs, reason, request)

    def _room(self, segment, appended: list[int], request: ChatRequest) -> int:
        """Tokens this request may sample: the budget left, the turn limits, the request's max_tokens."""
        mt = self.config.multi_turn
        if mt.max_assistant_turns is not None and segment.assistant_turns >= mt.max_assistant_turns:
            return 0
        if appended and mt.max_user_turns is not None and segment.user_turns >= mt.max_user_turns:
            return 0
        room = self.config.response_length - len(segment.response_ids) - len(appended)
        return min(room, request.max_tokens) if request.max_tokens is not None else room

    def _sampling(self, request: ChatRequest) -> SamplingConfig:
        sampling = replace(self.sampling, n=1)
        if request.temperature is not None:
            sampling = replace(sampling, temperature=request.temperature, do_sample=request.temperature > 0)
        if request.top_p is not None:
            sampling = replace(sampling, top_p=request.top_p)
        return sampling

    def _cut_at_stop(
        self, ids: list[int], log_probs: list[float], stops: list[str]
    ) -> tuple[list[int], list[float], str | None]:
        """The ids up to the token that completes the first stop string (kept: it was sampled), or all."""
        if not stops:
            return ids, log_probs, None
        for end in range(1, len(ids) + 1):
            text = self.tokenizer.decode(ids[:end], skip_special_tokens=False)
            if any(stop in text for stop in stops):
                return ids[:end], log_probs[:end], "stop"
        return ids, log_probs, None

    def _message(self, sampled: list[int], request: ChatRequest) -> dict[str, Any]:
        """The assistant message of ``sampled``: its text and, unless tool_choice=none, its tool calls."""
        ids = sampled[:-1] if sampled and sampled[-1] == self.tokenizer.eos_token_id else sampled
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        for stop in request.stop:
            text = text.split(stop, 1)[0]
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if not request.parse_tool_calls:
            return message
        parsed = self.parse(text)
        self.counts["tool_parse_errors"] += len(parsed.errors)
        if parsed.calls:
            message["content"] = parsed.text or None
            message["tool_calls"] = [
                {
                    "id": f"call_{uuid.uuid4().hex[:24]}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                }
                for call in parsed.calls
            ]
        return message

    def _answer_message(
        self,
        message: dict[str, Any],
        prompt_len: int,
        sampled: list[int],
        log_probs: list[float],
        reason: str,
        request: ChatRequest,
    ) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": reason, "logprobs": None}
        if request.logprobs:
            tokens = self.tokenizer.convert_ids_to_tokens(sampled)
            choice["logprobs"] = {
                "content": [
                    {"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
                    for t, lp in zip(tokens, log_probs)
                ]
            }
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": MODEL_ID,
            "choices": [choice],
            "usage": {
                "prompt_tokens": prompt_len,
                "completion_tokens": len(sampled),
                "total_tokens": prompt_len + len(sampled),
            },
        }


__all__ = ["MODEL_ID", "ChatSession"]
