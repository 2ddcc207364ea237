"""What an agent loop builds: a multi-turn trajectory as it grows (``TurnRecord``) and the finished one
(``AgentLoopOutput``).

Kept apart from the agent-loop package so that the OpenAI endpoint's transcript, which the
``openai_agent`` loop imports, can build on ``TurnRecord`` without importing the loops.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from verl_lite.workers.rollout.server import TokenOutput


@dataclass
class AgentLoopOutput:
    """One finished trajectory, as the trainer stores it."""

    prompt_ids: list[int]
    # Everything after the prompt: model tokens and tool-observation tokens.
    response_ids: list[int]
    # 1 on model tokens, 0 on tool/observation tokens.
    response_mask: list[int]
    # Rollout log-probs, 0.0 on mask-0 tokens.
    response_log_probs: list[float]
    # Assistant turns plus tool (user) turns, the prompt not counted.
    num_turns: int
    min_weight_version: int
    max_weight_version: int
    # Of the last generation ("stop" / "length" / "abort") or the limit that ended the loop (see tool_agent).
    finish_reason: str
    # tool_calls, tool_errors, tool_latency_s, ...
    metrics: dict[str, float] = field(default_factory=dict)
    # BaseTool.calc_reward of each tool this trajectory used, by tool name; the reward function sees it as
    # extra_info["tool_rewards"] (it is not added to the score, as in verl).
    tool_rewards: dict[str, float] = field(default_factory=dict)
    # The interaction's score of each of its turns, in order; the reward function sees them as
    # extra_info["turn_scores"].
    turn_scores: list[float] = field(default_factory=list)
    # The trajectory's reward when the loop decided it (openai_agent: what the agent returned); None =
    # the reward manager scores the response.
    reward: float | None = None


@dataclass
class TurnRecord:
    """A multi-turn trajectory as a loop grows it: after the prompt, model tokens (mask 1, with their
    rollout log-probs) and observation tokens (mask 0, log-prob 0.0), the turns so far, the weight
    versions that generated it and the loop's counters."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    assistant_turns: int = 0
    user_turns: int = 0
    versions: list[int] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)

    def add(self, ids: list[int], log_probs: list[float] | None, mask: int) -> None:
        """Append ``ids`` with ``mask``; ``log_probs`` None for tokens the model did not sample."""
        self.response_ids += ids
        self.response_mask += [mask] * len(ids)
        self.log_probs += list(log_probs) if log_probs is not None else [0.0] * len(ids)

    def assistant_turn(self, out: TokenOutput, room: int) -> None:
        """Append one generation's first ``room`` tokens (mask 1) as an assistant turn; remember the
        weight versions that produced it."""
        self.add(list(out.token_ids[:room]), out.log_probs[:room], mask=1)
        self.assistant_turns += 1
        self.versions += [out.min_weight_version, out.weight_version]

    def output(self, finish_reason: str, metrics: dict[str, float], **extra: Any) -> AgentLoopOutput:
        """The finished trajectory (``extra``: the other ``AgentLoopOutput`` fields, e.g. ``reward``)."""
        versions = self.versions or [-1]
        return AgentLoopOutput(
            prompt_ids=self.prompt_ids,
            response_ids=self.response_ids,
            response_mask=self.response_mask,
            response_log_probs=self.log_probs,
            num_turns=self.assistant_turns + self.user_turns,
            min_weight_version=min(versions),
            max_weight_version=max(versions),
            finish_reason=finish_reason,
            metrics=metrics,
            **extra,
        )


__all__ = ["AgentLoopOutput", "TurnRecord"]
