"""The ``tool_agent`` agent loop: generate, run the tool calls the model wrote, show it the results, repeat.

One trajectory is a state machine over turns::

    prompt (row messages rendered with the tool schemas)
      -> generate (mask 1) -> tool calls?  no -> the row's interaction?  no -> stop
                                                   yes -> its answer: ends the episode -> stop
                                                          or a user message (mask 0) -> generate ...
                                           yes -> run them (concurrently, each with a timeout)
                                               -> observation tokens (mask 0) -> generate ...

It stops on: no tool call ("stop"), a generation cut by its budget or aborted ("length" / "abort"),
``multi_turn.max_assistant_turns`` or ``max_user_turns`` (tool and interaction turns both count;
"max_assistant_turns" / "max_user_turns"), the interaction ending the episode ("stop"), or the
response budget (model and observation tokens together) filled ("length"; an observation that does not
fit is cut). The model's own token ids are kept exactly as sampled; observation tokens are the chat
template's rendering of the tool messages, taken as the difference between a conversation rendered with
and without them, so no generated token is ever re-tokenized. A tool that raises, times out or does not
exist gives the model an error text and counts in ``tool_errors``; ``run`` never raises for a tool.
Tools follow verl's ``BaseTool`` contract (``verl_lite.workers.tools.base``); each tool's ``calc_reward``
goes to the reward function as ``extra_info["tool_rewards"]``, not into the score.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from verl_lite.workers.agent_loop.base import (
    AgentLoop,
    AgentLoopContext,
    AgentLoopOutput,
    ServerClient,
    register_agent_loop,
)
from verl_lite.workers.config import SamplingConfig
from verl_lite.workers.rollout.server import TokenOutput
from verl_lite.workers.tools.base import BaseTool, call_result, created_id
from verl_lite.workers.tools.parsers import ParsedToolCalls, ToolCall, get_tool_parser
from verl_lite.workers.tools.rendering import ChatRenderer
from verl_lite.workers.turns import TurnRecord

# multi_turn.tool_response_truncate_side values.
TRUNCATE_SIDES = ("left", "middle", "right")


def truncate_tool_response(text: str, limit: int, side: str) -> str:
    """``text`` cut to ``limit`` characters, as verl does: ``side`` names the part that is kept.

    left keeps the start, right keeps the end, middle keeps both ends (half each); a marker shows the cut.
    """
    if len(text) <= limit:
        return text
    if side == "left":
        return text[:limit] + "...(truncated)"
    if side == "right":
        return "(truncated)..." + text[len(text) - limit :]
    head = limit // 2
    return text[:head] + "...(truncated)..." + text[len(text) - (limit - head) :]


@dataclass
class _Trajectory(TurnRecord):
    """The growing state of one run."""

    # Tool name -> instance id of the tools this trajectory created.
    instances: dict[str, str] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    tool_metrics: dict[str, list[float]] = field(default_factory=dict)
    # The conversation as chat messages (what an interaction reads).
    messages: list[dict[str, Any]] = field(default_factory=list)
    # The row's interaction, its instance id and its interaction_kwargs (None without one).
    interaction: Any = None
    episode: str = ""
    interaction_kwargs: dict[str, Any] = field(default_factory=dict)
    turn_scores: list[float] = field(default_factory=list)


@register_agent_loop("tool_agent")
class ToolAgentLoop(AgentLoop):
    """Multi-turn generation with tool calls, limited by ``rollout.multi_turn`` (see the module docstring)."""

    def __init__(self, context: AgentLoopContext):
        super().__init__(context)
        self.multi_turn = context.config.multi_turn
        self.parse = get_tool_parser(self.multi_turn.format)
        self.renderer = ChatRenderer(self.tokenizer, context.chat_template)

    async def run(
        self, row: dict[str, Any], client: ServerClient, sampling: SamplingConfig, max_tokens: int
    ) -> AgentLoopOutput:
        """One multi-turn trajectory of at most ``max_tokens`` response tokens (see ``AgentLoop.run``)."""
        traj = _Trajectory(self._prompt_ids(row), messages=[dict(m) for m in row.get("messages") or []])
        try:
            await self._start_interaction(traj, row)
            finish_reason = await self._turns(traj, row, client, sampling, max_tokens)
        finally:
            tool_rewards = await self._release(traj)
            if traj.interaction is not None and traj.episode:
                await traj.interaction.finalize_interaction(traj.episode)
        return traj.output(
            finish_reason, self._metrics(traj), tool_rewards=tool_rewards, turn_scores=traj.turn_scores
        )

    async def _turns(
        self,
        traj: _Trajectory,
        row: dict[str, Any],
        client: ServerClient,
        sampling: SamplingConfig,
        budget: int,
    ) -> str:
        """Alternate generations and tool turns until a stop condition; returns the finish reason."""
        mt = self.multi_turn
        while len(traj.response_ids) < budget:
            room = budget - len(traj.response_ids)
            out: TokenOutput = await client.generate(traj.prompt_ids + traj.response_ids, sampling, room)
            traj.assistant_turn(out, room)
            traj.messages.append(
                {
                    "role": "assistant",
                    "content": self.tokenizer.decode(out.token_ids, skip_special_tokens=True),
                }
            )
            if out.finish_reason != "stop":
                return out.finish_reason
            parsed = self.parse(self.tokenizer.decode(out.token_ids, skip_special_tokens=False))
            talks = not parsed.calls and not parsed.errors
            if talks and traj.interaction is None:
                return "stop"
            if mt.max_assistant_turns is not None and traj.assistant_turns >= mt.max_assistant_turns:
                return "max_assistant_turns"
            if mt.max_user_turns is not None and traj.user_turns >= mt.max_user_turns:
                return "max_user_turns"
            if len(traj.response_ids) >= budget:
                break
            if talks:
                ended, text = await self._interaction_turn(traj)
                if ended:
                    return "stop"
                messages = [{"role": "user", "content": text}]
            else:
                messages = [{"role": "tool", "content": t} for t in await self._tool_turn(parsed, row, traj)]
            traj.messages += messages
            observation = self._observation_ids(messages)
            traj.user_turns += 1
            room = budget - len(traj.response_ids)
            traj.add(observation[:room], None, mask=0)
            if len(observation) >= room:
                break
        return "length"

    # ---- interactions ----------------------------------------------------------------------------

    async def _start_interaction(self, traj: _Trajectory, row: dict[str, Any]) -> None:
        """Start the episode of the interaction the row names (``extra_info.interaction_kwargs.name``)."""
        kwargs = dict((row.get("extra_info") or {}).get("interaction_kwargs") or {})
        if not kwargs or not self.context.interactions:
            return
        name = kwargs.get("name", "interaction_agent")
        if name not in self.context.interactions:
            known = ", ".join(sorted(self.context.interactions))
            raise ValueError(
                f"extra_info.interaction_kwargs.name={name!r} is not in multi_turn.interaction_config_path; "
                f"known: {known}."
            )
        traj.interaction, traj.interaction_kwargs = self.context.interactions[name], kwargs
        traj.episode = await traj.interaction.start_interaction(uuid.uuid4().hex, **kwargs)

    async def _interaction_turn(self, traj: _Trajectory) -> tuple[bool, str]:
        """The interaction's answer to the conversation: whether it ends the episode, and its text."""
        ended, text, score, metrics = await traj.interaction.generate_response(
            traj.episode, traj.messages, **traj.interaction_kwargs
        )
        traj.turn_scores.append(float(score))
        traj.counts["interaction_turns"] += 1
        for key, value in (metrics or {}).items():
            traj.tool_metrics.setdefault(f"interaction/{key}", []).append(float(value))
        return bool(ended), str(text)

    # ---- tools ---------------------------------------------------------------------------------

    async def _tool_turn(self, parsed: ParsedToolCalls, row: dict[str, Any], traj: _Trajectory) -> list[str]:
        """The result texts of one assistant turn's calls (in order), then one per unreadable call."""
        calls = parsed.calls[: self.multi_turn.max_parallel_calls]
        traj.counts["tool_calls_dropped"] += len(parsed.calls) - len(calls)
        traj.counts["tool_parse_errors"] += len(parsed.errors)
        create_errors = await self._create_instances({c.name for c in calls}, row, traj)
        texts = await asyncio.gather(*(self._call(c, traj, create_errors) for c in calls))
        limit, side = self.multi_turn.max_tool_response_length, self.multi_turn.tool_response_truncate_side
        texts += [f"Error: {e}" for e in parsed.errors]
        return [truncate_tool_response(t, limit, side) for t in texts]

    async def _create_instances(
        self, names: set[str], row: dict[str, Any], traj: _Trajectory
    ) -> dict[str, str]:
        """Create this trajectory's instance of each named tool not yet created; returns errors by name."""
        errors = {}
        tools_kwargs = row.get("tools_kwargs") or {}
        for name in sorted(names - set(traj.instances)):
            tool = self.context.tools.get(name)
            if tool is None:
                continue
            instance_id = uuid.uuid4().hex
            kwargs = (tools_kwargs.get(name) or {}).get("create_kwargs") or {}
            try:
                # verl's loop passes the row's arguments as create_kwargs=...; the tool may choose the id
                created = await asyncio.wait_for(
                    tool.create(instance_id, create_kwargs=kwargs), self.multi_turn.tool_timeout_s
                )
                traj.instances[name] = created_id(created, instance_id)
            except Exception as err:  # a tool's failure is the model's observation
                errors[name] = f"Error: tool {name!r} could not start: {_describe(err)}"
        return errors

    async def _call(self, call: ToolCall, traj: _Trajectory, create_errors: dict[str, str]) -> str:
        """Run one call; any failure becomes an error text for the model and counts in tool_errors."""
        traj.counts["tool_calls"] += 1
        traj.counts[f"tool_calls/{call.name}"] += 1
        tool: BaseTool | None = self.context.tools.get(call.name)
        if tool is None or call.name in create_errors:
            traj.counts["tool_errors"] += 1
            known = ", ".join(sorted(self.context.tools)) or "none"
            return create_errors.get(call.name) or f"Error: unknown tool {call.name!r}; available: {known}."
        timeout = self.multi_turn.tool_timeout_s
        start = time.perf_counter()
        try:
            result = call_result(
                await asyncio.wait_for(tool.execute(traj.instances[call.name], call.arguments), timeout)
            )
        except asyncio.TimeoutError:
            traj.counts["tool_errors"] += 1
            return f"Error: {call.name} did not finish within {timeout:g} s."
        except Exception as err:  # a tool's failure is the model's observation
            traj.counts["tool_errors"] += 1
            return f"Error: {call.name} failed: {_describe(err)}"
        finally:
            traj.latencies.append(time.perf_counter() - start)
        if result.reward is not None:
            traj.counts["tool_step_reward"] += result.reward
        traj.counts["tool_media_dropped"] += result.media
        for key, value in result.metrics.items():
            traj.tool_metrics.setdefault(f"{call.name}/{key}", []).append(float(value))
        return result.text

    async def _release(self, traj: _Trajectory) -> dict[str, float]:
        """Each created instance's calc_reward by tool name, then release it; failures count in tool_errors."""
        rewards, timeout = {}, self.multi_turn.tool_timeout_s
        for name, instance_id in traj.instances.items():
            tool = self.context.tools[name]
            try:
                rewards[name] = float(await asyncio.wait_for(tool.calc_reward(instance_id), timeout))
                traj.counts["tool_reward"] += rewards[name]
            except Exception:  # scoring goes on without this tool's reward
                traj.counts["tool_errors"] += 1
            try:
                await asyncio.wait_for(tool.release(instance_id), timeout)
            except Exception:  # a tool that cannot clean up must not fail the trajectory
                traj.counts["tool_errors"] += 1
        traj.instances.clear()
        return rewards

    def _metrics(self, traj: _Trajectory) -> dict[str, float]:
        metrics = {
            key: 0.0
            for key in ("tool_calls", "tool_errors", "tool_parse_errors", "tool_calls_dropped", "tool_reward")
        }
        if self.context.interactions:
            metrics["interaction_turns"] = 0.0
        metrics.update({key: float(value) for key, value in traj.counts.items()})
        metrics["tool_latency_s"] = sum(traj.latencies) / len(traj.latencies) if traj.latencies else 0.0
        metrics["assistant_turns"] = float(traj.assistant_turns)
        metrics["user_turns"] = float(traj.user_turns)
        metrics.update({key: sum(v) / len(v) for key, v in traj.tool_metrics.items()})
        return metrics

    # ---- tokens --------------------------------------------------------------------------------

    def _prompt_ids(self, row: dict[str, Any]) -> list[int]:
        """The row's messages rendered with the tool schemas; its ``prompt_ids`` when it has no messages."""
        messages = row.get("messages")
        if messages is None or len(messages) == 0:
            return list(row["prompt_ids"])
        return self.renderer.prompt_ids([dict(m) for m in messages], self.context.tool_schemas())

    def _observation_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """Tokens of ``messages`` (tool results or a user turn) and the next generation prompt, as the chat
        template renders them after the model's turn."""
        return self.renderer.appended_ids(messages)


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
