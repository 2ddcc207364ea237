"""Tokenize SFT chat rows (or plain text) into ``input_ids`` / ``labels`` and collate them into batches.

Chat mode learns every assistant turn of a conversation, as verl's multi-turn SFT dataset does: the
tokens of each assistant message (its content and end-of-turn token, as the chat template renders
them after the generation prompt) keep their ids as labels; system, user and tool turns and the
generation prompts get -100, so cross-entropy covers only what the model would have generated. A
row's optional ``tools`` (tool schemas in OpenAI function format, a list or its JSON string) reach
the chat template as ``tools=``, as they do at rollout time. The rendered chat is tokenized span by
span (context, assistant turn, context, ...), so each assistant span is exactly the ids the policy
generates after the rendered prompt. Pre-training mode makes every real token a target. Labels are
aligned with ``input_ids`` (HF causal-LM convention: the model shifts them). Rows are right-truncated
to ``max_length``; rows left with no target token are skipped and counted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from .collate import right_pad

__all__ = ["IGNORE_INDEX", "SFTDataset", "collate_sft", "encode_chat", "encode_text"]

# label of a position that contributes no loss (torch.nn.functional.cross_entropy's ignore_index)
IGNORE_INDEX = -100
Example = dict[str, list[int]]


def encode_chat(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    max_length: int,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> Example | None:
    """Token ids and labels of one conversation with a target on every assistant turn (verl's multi-turn SFT).

    Each assistant message's span is what the chat template adds for it after the generation prompt
    (its content and end-of-turn token); those tokens keep their ids as labels, every other token
    (system, user and tool turns, generation prompts) gets -100. The text is tokenized span by span,
    so each assistant span is exactly the ids the policy would generate after the rendered prompt.

    Args:
        tools: tool schemas passed to the chat template (None: a conversation without tools).

    Returns:
        ``{"input_ids", "labels"}`` (lists of equal length <= ``max_length``, right-truncated), or None
        when truncation leaves no target token.
    """
    messages = list(messages)
    turns = [i for i, message in enumerate(messages) if message["role"] == "assistant"]
    if not turns:
        raise ValueError("encode_chat: a chat row needs at least one assistant message to learn.")
    extra = {"tools": list(tools)} if tools else {}

    def render(upto: int, generation_prompt: bool = False) -> str:
        return tokenizer.apply_chat_template(
            messages[:upto], tokenize=False, add_generation_prompt=generation_prompt, **extra
        )

    full = render(len(messages))
    # (start, end, is_target) character spans of ``full``: context, assistant turn, context, ...
    spans, done = [], 0
    for i in turns:
        prompt, through = render(i, generation_prompt=True), render(i + 1)
        if not (through.startswith(prompt) and full.startswith(through)):
            raise ValueError(
                "encode_chat: the chat template does not render each conversation prefix as a prefix of "
                "the whole chat, so assistant turns cannot be located."
            )
        spans += [(done, len(prompt), False), (len(prompt), len(through), True)]
        done = len(through)
    spans.append((done, len(full), False))
    input_ids: list[int] = []
    labels: list[int] = []
    for start, end, is_target in spans:
        if start == end:
            continue
        ids = tokenizer(full[start:end], add_special_tokens=False)["input_ids"]
        input_ids += ids
        labels += ids if is_target else [IGNORE_INDEX] * len(ids)
    input_ids, labels = input_ids[:max_length], labels[:max_length]
    if all(label == IGNORE_INDEX for label in labels):
        return None
    return {"input_ids": input_ids, "labels": labels}


def encode_text(tokenizer: Any, text: str, max_length: int) -> Example:
    """Pre-training example: ``text`` followed by eos, every token a target, cut to ``max_length``."""
    input_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if tokenizer.eos_token_id is not None:
        input_ids = input_ids + [tokenizer.eos_token_id]
    input_ids = input_ids[:max_length]
    return {"input_ids": input_ids, "labels": list(input_ids)}


class SFTDataset(Dataset):
    """Pre-tokenized SFT examples held in memory.

    Args:
        rows: mappings with a ``messages`` list and optional ``tools`` (chat mode) or a ``text`` string
            (pretrain mode).
        tokenizer: a HF tokenizer with a chat template (chat mode).
        max_length: longest example in tokens.
        mode: ``"chat"`` (loss on every assistant turn) or ``"pretrain"`` (loss on every token).

    Attributes:
        num_truncated: chat rows skipped because ``max_length`` cut away every assistant turn.
    """

    def __init__(
        self, rows: Iterable[Mapping[str, Any]], tokenizer: Any, max_length: int, mode: str = "chat"
    ):
        if mode not in ("chat", "pretrain"):
            raise ValueError(f"SFTDataset: mode must be 'chat' or 'pretrain', got {mode!r}.")
        self.examples: list[Example] = []
        self.num_truncated = 0
        for row in rows:
            if mode == "pretrain":
                self.examples.append(encode_text(tokenizer, row["text"], max_length))
                continue
            example = encode_chat(tokenizer, list(row["messages"]), max_length, _row_tools(row))
            if example is None:
                self.num_truncated += 1
            else:
                self.examples.append(example)

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> Example:
        return self.examples[index]


def _row_tools(row: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The row's tool schemas: its ``tools`` list, or that list written as a JSON string; None without."""
    tools = row.get("tools")
    if isinstance(tools, str):
        tools = json.loads(tools) if tools.strip() else None
    return list(tools) if tools else None


def collate_sft(examples: Sequence[Example], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a mini-batch to its longest row.

    Returns:
        ``input_ids`` (batch, max_len) padded with ``pad_token_id``, ``attention_mask`` (batch, max_len)
        with 0 on padding, ``labels`` (batch, max_len) with -100 on padding.
    """
    ids = [example["input_ids"] for example in examples]
    return {
        "input_ids": right_pad(ids, pad_token_id),
        "attention_mask": right_pad([[1] * len(row) for row in ids], 0),
        "labels": right_pad([example["labels"] for example in examples], IGNORE_INDEX),
    }
