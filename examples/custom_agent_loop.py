"""A custom agent loop: answer, read a fixed nudge the model did not write, answer again (``answer_twice``).

It shows what every agent loop must keep right: the server's ids are stored exactly as sampled, tokens
the loop adds itself get ``response_mask`` 0 and log-prob 0.0 (no loss, no advantage ever reaches
them), and every request of a trajectory goes through the ``client`` it was given (one server, its
prefix cache). Select it for every row, or per row with an ``agent_name`` column::

    python -m verl_lite.main_ppo trainer.extensions=[examples/custom_agent_loop.py] \\
        actor_rollout_ref.rollout.agent.default_agent_loop=answer_twice
"""

from __future__ import annotations

from verl_lite.workers.agent_loop import AgentLoop, AgentLoopOutput, register_agent_loop

NUDGE = " Check:"


@register_agent_loop("answer_twice")
class AnswerTwice(AgentLoop):
    """Generate, append ``NUDGE`` (mask 0), generate again within what is left of the budget."""

    async def run(self, row, client, sampling, max_tokens):
        prompt = list(row["prompt_ids"])
        first = await client.generate(prompt, sampling, max(1, max_tokens // 2))
        nudge = self.tokenizer.encode(NUDGE, add_special_tokens=False)
        left = max_tokens - len(first.token_ids) - len(nudge)
        if first.finish_reason != "stop" or left < 1:  # no room, or the first answer was cut: done
            return _output(prompt, [(first, 1)], num_turns=1, finish_reason=first.finish_reason)
        second = await client.generate(prompt + first.token_ids + nudge, sampling, left)
        return _output(prompt, [(first, 1), (nudge, 0), (second, 1)], 3, second.finish_reason)


def _output(prompt, parts, num_turns, finish_reason) -> AgentLoopOutput:
    ids, mask, log_probs, versions = [], [], [], []
    for part, sampled in parts:
        if sampled:
            ids += part.token_ids
            log_probs += part.log_probs
            versions.append(part.weight_version)
        else:
            ids += part
            log_probs += [0.0] * len(part)
        mask += [sampled] * (len(part.token_ids) if sampled else len(part))
    return AgentLoopOutput(
        prompt_ids=prompt,
        response_ids=ids,
        response_mask=mask,
        response_log_probs=log_probs,
        num_turns=num_turns,
        min_weight_version=min(versions),
        max_weight_version=max(versions),
        finish_reason=finish_reason,
    )
