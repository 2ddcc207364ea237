"""The ``single_turn`` agent loop: one generation on the row's templated prompt, every token the model's."""

from __future__ import annotations

from typing import Any

from verl_lite.workers.agent_loop.base import AgentLoop, AgentLoopOutput, ServerClient, register_agent_loop
from verl_lite.workers.config import SamplingConfig


@register_agent_loop("single_turn")
class SingleTurnAgentLoop(AgentLoop):
    """Generate once from ``row["prompt_ids"]``; the response mask is all ones."""

    async def run(
        self, row: dict[str, Any], client: ServerClient, sampling: SamplingConfig, max_tokens: int
    ) -> AgentLoopOutput:
        """One trajectory: the prompt and one sampled continuation of at most ``max_tokens`` tokens."""
        prompt_ids = list(row["prompt_ids"])
        out = await client.generate(prompt_ids, sampling, max_tokens)
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=list(out.token_ids),
            response_mask=[1] * len(out.token_ids),
            response_log_probs=list(out.log_probs),
            num_turns=1,
            min_weight_version=out.min_weight_version,
            max_weight_version=out.weight_version,
            finish_reason=out.finish_reason,
        )
