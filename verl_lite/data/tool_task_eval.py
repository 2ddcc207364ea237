"""Measure a causal LM on the calculator tool task: the tool loop run by hand with batched HF ``generate``.

Used to check the embedded tiny agent model (``scripts/build_tiny_model.py``); the RL trainer runs the
real agent loop. One episode: render the question with the tool schemas, generate one assistant turn,
and if it holds a hermes ``<tool_call>{"name": "calculator", "arguments": {"expression": ...}}</tool_call>``
run :func:`~verl_lite.data.synthetic_tools.calculate`, append the tool message's tokens (the chat
template's rendering of it, as the agent loop does: the model's own ids are kept as generated) and
generate again. Modes (:data:`MODES`):

* ``tool``: the model decides; its tool calls are executed.
* ``no_tool``: the model decides, but no tool runs: a response that calls one ends without an answer.
* ``force_tool``: the response starts with ``<tool_call>`` (always calling the tool: the ceiling).
* ``direct``: the model may not open a tool call (its first token ``<`` is banned): its own arithmetic
  on every question.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from verl_lite.data.synthetic_tools import CALCULATOR_SCHEMA, calculate
from verl_lite.reward.scorers.synthetic_calc import compute_calc_score

__all__ = [
    "MODES",
    "Episode",
    "Mode",
    "evaluate_tool_task",
    "parse_tool_call",
    "run_episodes",
    "tool_observation",
]


@dataclass(frozen=True)
class Mode:
    """How an episode treats tool calls."""

    # text the response is forced to start with
    prefill: str = ""
    # run the calculator on a tool call and show the model its result
    execute: bool = True
    # ban the first token of "<tool_call>", so the model answers without the tool
    ban_calls: bool = False


MODES = {
    "tool": Mode(),
    "no_tool": Mode(execute=False),
    "force_tool": Mode(prefill="<tool_call>"),
    "direct": Mode(execute=False, ban_calls=True),
}
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def parse_tool_call(text: str) -> tuple[str, dict[str, Any]] | None:
    """``(name, arguments)`` of the first hermes tool call in ``text``; None if absent or not JSON."""
    match = _TOOL_CALL.search(text)
    if match is None:
        return None
    try:
        call = json.loads(match.group(1))
    except json.JSONDecodeError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("arguments"), dict):
        return None
    return str(call.get("name")), call["arguments"]


def tool_observation(tokenizer: Any, content: str) -> str:
    """The text the chat template adds for a tool message after an assistant turn (to the assistant tag)."""
    chat = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    base = tokenizer.apply_chat_template(chat, tokenize=False)
    full = tokenizer.apply_chat_template(
        [*chat, {"role": "tool", "content": content}], tokenize=False, add_generation_prompt=True
    )
    if not full.startswith(base):
        raise ValueError("tool_observation: the chat template does not render the chat as a prefix.")
    return full[len(base) :]


@dataclass
class Episode:
    """One question's trajectory: the ids so far and the response text (model turns and observations)."""

    context_ids: list[int]
    response: str
    tool_calls: int = 0
    done: bool = False


def _run_calculator(call: tuple[str, dict[str, Any]] | None) -> str:
    if call is None:
        return "error: the tool call is not JSON with name and arguments"
    name, arguments = call
    if name != "calculator" or "expression" not in arguments:
        return "error: unknown tool or missing expression"
    return calculate(str(arguments["expression"]))


@torch.no_grad()
def _generate(
    model: Any,
    tokenizer: Any,
    contexts: list[list[int]],
    max_new_tokens: int,
    temperature: float,
    ban_calls: bool = False,
) -> list[list[int]]:
    """Generated ids per context (left-padded batch; each cut after its eos)."""
    width = max(len(ids) for ids in contexts)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in contexts])
    attention_mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in contexts])
    sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    options = sampling if temperature > 0 else {"do_sample": False}
    if ban_calls:
        options["bad_words_ids"] = [tokenizer("<tool_call>", add_special_tokens=False)["input_ids"][:1]]
    out = model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        max_new_tokens=max_new_tokens,
        pad_token_id=pad,
        eos_token_id=tokenizer.eos_token_id,
        **options,
    )
    generated = []
    for row in out[:, width:].tolist():
        end = row.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in row else len(row)
        generated.append(row[:end])
    return generated


def run_episodes(
    model: Any,
    tokenizer: Any,
    questions: Sequence[Sequence[Mapping[str, str]]],
    mode: str = "tool",
    max_new_tokens: int = 128,
    max_tool_calls: int = 2,
    temperature: float = 0.0,
    batch_size: int = 64,
) -> list[Episode]:
    """Run one episode per chat in ``questions`` (lists of messages) in ``mode`` (see :data:`MODES`)."""
    chosen = MODES[mode]
    episodes = []
    for messages in questions:
        text = tokenizer.apply_chat_template(
            list(messages), tools=[CALCULATOR_SCHEMA], tokenize=False, add_generation_prompt=True
        )
        ids = tokenizer(text + chosen.prefill, add_special_tokens=False)["input_ids"]
        episodes.append(Episode(context_ids=ids, response=chosen.prefill))
    was_training = model.training
    model.eval()
    for turn in range(max_tool_calls + 1):
        active = [e for e in episodes if not e.done]
        for start in range(0, len(active), batch_size):
            batch = active[start : start + batch_size]
            contexts = [e.context_ids for e in batch]
            generated = _generate(model, tokenizer, contexts, max_new_tokens, temperature, chosen.ban_calls)
            may_call = chosen.execute and turn < max_tool_calls
            for episode, ids in zip(batch, generated):
                _advance(episode, ids, tokenizer, may_call, chosen.prefill if turn == 0 else "")
    model.train(was_training)
    return episodes


def _advance(episode: Episode, ids: list[int], tokenizer: Any, may_call: bool, prefill: str) -> None:
    """Append one generated turn; run its tool call and append the observation when allowed."""
    text = tokenizer.decode(ids, skip_special_tokens=True)
    episode.response += text
    episode.context_ids = episode.context_ids + ids
    stopped = bool(ids) and ids[-1] == tokenizer.eos_token_id
    has_call = "<tool_call>" in prefill + text
    episode.tool_calls += int(has_call)
    if not (may_call and has_call and stopped):
        episode.done = True
        return
    observation = tool_observation(tokenizer, _run_calculator(parse_tool_call(prefill + text)))
    observation_ids = tokenizer(observation, add_special_tokens=False)["input_ids"]
    episode.context_ids += observation_ids
    episode.response += tokenizer.decode(observation_ids, skip_special_tokens=True)


def evaluate_tool_task(
    model: Any, tokenizer: Any, rows: Sequence[Mapping[str, Any]], mode: str = "tool", **kwargs: Any
) -> dict[str, float]:
    """Accuracy and tool-call rate of ``model`` on RL rows of the tool task, overall and per problem kind.

    Args:
        rows: RL rows (``messages`` or ``prompt``, ``reward_model.ground_truth``, ``extra_info.kind``).
        mode: see :data:`MODES`.
        **kwargs: :func:`run_episodes` options (``max_new_tokens``, ``temperature``, ...).

    Returns:
        ``{"acc", "tool_rate", "acc/<kind>", "tool_rate/<kind>"}`` (means over rows).
    """
    questions = [list(row.get("messages") or row["prompt"]) for row in rows]
    episodes = run_episodes(model, tokenizer, questions, mode, **kwargs)
    groups: dict[str, list[tuple[float, float]]] = {"": []}
    for row, episode in zip(rows, episodes):
        result = compute_calc_score(episode.response, row["reward_model"]["ground_truth"])
        sample = (result["acc"], float(episode.tool_calls > 0))
        groups[""].append(sample)
        groups.setdefault(f"/{row['extra_info']['kind']}", []).append(sample)
    metrics = {}
    for suffix, samples in sorted(groups.items()):
        metrics[f"acc{suffix}"] = sum(a for a, _ in samples) / len(samples)
        metrics[f"tool_rate{suffix}"] = sum(t for _, t in samples) / len(samples)
    return metrics
