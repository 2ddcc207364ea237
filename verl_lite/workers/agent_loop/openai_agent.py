"""The ``openai_agent`` agent loop: a user's agent, written against the OpenAI client, is one trajectory.

The user's ``async def agent(client: openai.AsyncOpenAI, row: dict) -> float | None`` (file and name in
``rollout.agent.openai.function``) gets a client whose base URL is this trajectory's on the process's
OpenAI endpoint (:mod:`verl_lite.workers.openai_api`): every chat completion it asks for is generated on
the trajectory's sticky rollout server and recorded token-exactly. It returns the reward, or None to let
the configured reward manager score the response.

What is trained: the **segment of the agent's last request** (the conversation its final answer belongs
to, see :mod:`verl_lite.workers.openai_api.transcript`), with the whole trajectory's reward on its last
sampled token. Requests in other segments (a sub-agent's calls, an abandoned history) were generated and
count in ``openai_segments``, but are not trained on.

An agent that raises, returns something other than a number or None, or runs past
``rollout.agent.openai.timeout_s`` is a counted failure (``agent_errors`` / ``agent_timeouts``): its
trajectory keeps the tokens it has, gets reward 0.0, and the step goes on. A rollout server that is gone
for good still ends the run.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import ssl
import sys
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from verl_lite.utils.extensions import function_from_file
from verl_lite.workers.agent_loop.base import (
    AgentLoop,
    AgentLoopContext,
    AgentLoopOutput,
    ServerClient,
    register_agent_loop,
)
from verl_lite.workers.config import SamplingConfig
from verl_lite.workers.openai_api.session import ChatSession
from verl_lite.workers.openai_api.transcript import Segment
from verl_lite.workers.tools.rendering import ChatRenderer

if TYPE_CHECKING:  # imported when an agent first runs: every process that registers the loops skips them
    import httpx
    import openai

KEY = "actor_rollout_ref.rollout.agent.openai.function"
# The API key the agent's client sends (the endpoint trusts the URL's token, not this).
API_KEY = "verl-lite"


@functools.cache
def load_agent(path: str | None, name: str):
    """The agent coroutine function ``name`` of the file at ``path``.

    Raises:
        ValueError: no path, no such file or function, or the function is not ``async def``.
    """
    if not path:
        raise ValueError(
            f"{KEY}.path is null; the openai_agent loop needs the python file defining the agent."
        )
    try:
        fn = function_from_file(path, name, KEY)
    except FileNotFoundError as err:
        raise ValueError(str(err)) from None
    if not inspect.iscoroutinefunction(fn):
        raise ValueError(
            f"{KEY}.name={name!r} in {path!r} is not an async function; define "
            f"`async def {name}(client, row) -> float | None`."
        )
    return fn


@register_agent_loop("openai_agent")
class OpenAIAgentLoop(AgentLoop):
    """Runs the configured OpenAI-client agent once per trajectory (see the module docstring)."""

    def __init__(self, context: AgentLoopContext):
        super().__init__(context)
        ref = context.config.agent.openai.function
        self.agent = load_agent(ref.path, ref.name)
        self.timeout_s = context.config.agent.openai.timeout_s
        self.renderer = ChatRenderer(self.tokenizer, context.chat_template)

    async def run(
        self, row: dict[str, Any], client: ServerClient, sampling: SamplingConfig, max_tokens: int
    ) -> AgentLoopOutput:
        """One run of the agent on ``row`` (see ``AgentLoop.run``); never raises for the agent's faults."""
        import openai

        from verl_lite.workers.openai_api.endpoint import endpoint_on_this_loop

        endpoint = await endpoint_on_this_loop()
        session = ChatSession(
            self.renderer, client, sampling, replace(self.config, response_length=max_tokens)
        )
        token, base_url = endpoint.open(session)
        counts: Counter = Counter()
        http = _http_client()
        oai = openai.AsyncOpenAI(base_url=base_url, api_key=API_KEY, max_retries=0, http_client=http)
        try:
            reward = await self._call_agent(oai, row, counts)
        finally:
            endpoint.close(token)
            await http.aclose()
        if session.fatal is not None:
            raise session.fatal
        counts.update(session.counts)
        counts["openai_segments"] += len(session.transcript.segments)
        failed = counts["agent_errors"] + counts["agent_timeouts"] > 0
        return self._output(row, session.transcript.last, counts, 0.0 if failed else reward)

    async def _call_agent(
        self, oai: openai.AsyncOpenAI, row: dict[str, Any], counts: Counter
    ) -> float | None:
        """The agent's reward; its failures are counted in ``counts`` (and return None)."""
        try:
            reward = await asyncio.wait_for(self.agent(oai, _agent_row(row)), self.timeout_s)
        except asyncio.TimeoutError:
            counts["agent_timeouts"] += 1
            return None
        except Exception as err:  # the agent's fault is its trajectory's failure, not the step's
            counts["agent_errors"] += 1
            _report(f"{type(err).__name__}: {err}")
            return None
        if reward is not None and (isinstance(reward, bool) or not isinstance(reward, int | float)):
            counts["agent_errors"] += 1
            _report(f"the agent returned {reward!r}; return a number or None (the reward manager scores).")
            return None
        return None if reward is None else float(reward)

    def _output(
        self, row: dict[str, Any], segment: Segment | None, counts: Counter, reward: float | None
    ) -> AgentLoopOutput:
        if segment is None:  # nothing generated: one masked EOS keeps the trajectory well-formed
            segment = Segment(self._row_prompt_ids(row), tools_key="")
            segment.add([self.tokenizer.eos_token_id], None, mask=0)
            segment.finish_reason = "stop"
        metrics = {
            key: 0.0 for key in ("agent_errors", "agent_timeouts", "openai_requests", "openai_segments")
        }
        metrics.update({key: float(value) for key, value in counts.items()})
        return segment.output(segment.finish_reason, metrics, reward=reward)

    def _row_prompt_ids(self, row: dict[str, Any]) -> list[int]:
        messages = row.get("messages")
        if messages is None or len(messages) == 0:
            return list(row["prompt_ids"])
        return self.renderer.prompt_ids([dict(m) for m in messages])


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context for every agent's HTTP client: building one costs ~50 ms of the event loop."""
    return ssl.create_default_context()


def _http_client() -> httpx.AsyncClient:
    """A trajectory's own HTTP client: one connection to the loopback endpoint, no per-request timeout
    (``rollout.agent.openai.timeout_s`` bounds the whole agent). A client per trajectory, not one shared:
    httpx's pool scans every connection for each request, quadratic in the concurrent agents."""
    import httpx

    transport = httpx.AsyncHTTPTransport(verify=_tls_context())
    return httpx.AsyncClient(trust_env=False, timeout=None, transport=transport)


def _agent_row(row: dict[str, Any]) -> dict[str, Any]:
    """The row as the agent sees it: plain python values (``messages`` as a list of dicts)."""
    messages = row.get("messages")
    plain = [dict(m) for m in messages] if messages is not None else None
    return {**row, "messages": plain, "prompt_ids": list(row["prompt_ids"])}


def _report(problem: str) -> None:
    print(f"verl_lite: openai_agent: {problem}", file=sys.stderr, flush=True)


__all__ = ["OpenAIAgentLoop", "load_agent"]
