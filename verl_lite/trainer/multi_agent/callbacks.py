"""Calling the user's task functions: formatters, the joint reward, its processor, the eval schedule.

Pure Python (no Ray): these decide what the model sees and what each joint answer is worth, so they are
testable without a model.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

Formatter = Callable[..., str]
RewardFunc = Callable[..., Sequence[float]]


def accepts_keyword(fn: Callable, name: str) -> bool:
    """True when ``fn`` takes a keyword argument ``name`` (by name or through ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.kind is inspect.Parameter.VAR_KEYWORD
        or (p.name == name and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
        for p in params
    )


def default_formatter(item: dict[str, Any]) -> str:
    """The task's ``prompt`` field (the last user message when it is a chat)."""
    prompt = item["prompt"]
    if isinstance(prompt, (list, tuple)):
        return str([m for m in prompt if m.get("role") == "user"][-1]["content"])
    return str(prompt)


def agent_formatters(formatters: Formatter | Sequence[Formatter] | None, num_agents: int) -> list[Formatter]:
    """One formatter per agent: a shared one repeated, or a list in agent order (its length checked)."""
    if formatters is None:
        return [default_formatter] * num_agents
    if callable(formatters):
        return [formatters] * num_agents
    formatters = list(formatters)
    if len(formatters) != num_agents:
        raise ValueError(
            f"formatters has {len(formatters)} entries for num_agents={num_agents}; pass one shared "
            f"formatter or exactly {num_agents}, in agent order."
        )
    return formatters


def format_prompt(formatter: Formatter, item: dict[str, Any], external_prompts: Any = None) -> str:
    """``formatter(item)``, with ``external_prompts`` passed on turns after the first when it takes them."""
    if external_prompts is not None and accepts_keyword(formatter, "external_prompts"):
        return formatter(item, external_prompts=external_prompts)
    text = formatter(item)
    if external_prompts is not None:  # a formatter without the keyword: the transition text follows it
        text = f"{text}\n{external_prompts}"
    return text


def joint_rewards(
    reward_func: RewardFunc,
    completions: Sequence[Sequence[str]],
    batch_items: list[dict[str, Any]],
    reward_processor: Callable[[float], float] | None = None,
) -> list[float]:
    """One reward per aligned tuple ``(completions[0][j], completions[1][j], ...)``, processed.

    As CoMLRL 1.4 does, ``reward_func`` is called once per joint answer j with one-element lists
    (``[completions[0][j]], [completions[1][j]], ...``), so both a function that loops over its lists and
    one that reads ``a[0]`` score it; it returns one reward (a number or a one-element list).

    Args:
        completions: per agent (in agent order) the list of its answers; all lists have one length.
        batch_items: the task items, passed as ``batch_items=`` when ``reward_func`` accepts it.
    """
    kwargs = {"batch_items": batch_items} if accepts_keyword(reward_func, "batch_items") else {}
    rewards = []
    for j in range(len(completions[0])):
        out = reward_func(*[[answers[j]] for answers in completions], **kwargs)
        values = [out] if isinstance(out, (int, float)) else list(out)
        if len(values) != 1:
            raise ValueError(
                f"reward_func returned {len(values)} rewards for one joint answer (it is called with one "
                "completion per agent); it must return one."
            )
        rewards.append(float(values[0]))
    if reward_processor is not None:
        rewards = [float(reward_processor(r)) for r in rewards]
    return rewards


def eval_due(tasks_done: int, task_in_epoch: int, eval_interval: int) -> bool:
    """Whether training evaluates before its next task.

    Args:
        tasks_done: training tasks finished so far in the run (``eval_interval`` counts these).
        task_in_epoch: the next task's 0-based position in its epoch.
        eval_interval: 0 never evaluates on its own (``evaluate()`` only); otherwise evaluation runs
            before task 0 of each epoch and whenever ``tasks_done`` is a multiple of it.
    """
    return eval_interval > 0 and (task_in_epoch == 0 or tasks_done % eval_interval == 0)


class RewardProcessors:
    """Ready-made ``reward_processor`` functions."""

    @staticmethod
    def scale(factor: float = 1.0) -> Callable[[float], float]:
        """Multiply each reward by ``factor``."""
        return lambda reward: reward * factor

    @staticmethod
    def shift(value: float = 0.0) -> Callable[[float], float]:
        """Add ``value`` to each reward."""
        return lambda reward: reward + value

    @staticmethod
    def identity() -> Callable[[float], float]:
        """Leave rewards as they are (the default)."""
        return lambda reward: reward
