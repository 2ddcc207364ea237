"""A two-turn task for the ``magrpo`` mode's test: agent prompts, a joint reward, an external transition."""


def formatter(item, external_prompts=None):
    text = item["prompt"][-1]["content"] if isinstance(item["prompt"], list) else item["prompt"]
    return f"{text}\n{external_prompts}" if external_prompts else text


def reward_func(first, second, *, batch_items):
    # the row reaches the reward untouched (the embedded task's ground truth sits in reward_model)
    assert "reward_model" in batch_items[0]
    return [min(len(b) / max(len(a), 1), 2.0) / 2.0 for a, b in zip(first, second)]


def external_transition(
    *, prompt, agent_completions, num_agents, prompt_history_per_agent, response_history_per_agent
):
    # CoMLRL's contract: the task prompt, this turn's joint answer and every agent's history so far
    assert len(prompt_history_per_agent[0]) == len(response_history_per_agent[1]) >= 1
    turn = len(response_history_per_agent[0])
    return [
        f"Turn {turn + 1}. The other agent said: {agent_completions[1 - i][:6]!r}" for i in range(num_agents)
    ]
