"""Tokenize SFT chat rows (or plain text) into ``input_ids`` / ``labels`` and collate them into batches.

Chat mode keeps the final assistant turn as the target: every earlier position has label -100, so
cross-entropy covers only the answer (and its closing eos token). A row's optional ``tools`` (tool
schemas in OpenAI function format, a list or its JSON string) reach the chat template as ``tools=``,
as they do at rollout time; to train several assistant turns of one conversation, give one row per
turn, each ending with it (``verl_lite.data.synthetic_tools`` does). The prompt and the answer are
tokenized separately and concatenated, so the training sequence is exactly what the policy sees at
rollout time (prompt ids from ``add_generation_prompt=True``, then generated ids). Pre-training mode
makes every real token a target. Labels are aligned with ``input_ids`` (HF causal-LM convention: the
model shifts them). Rows whose target is cut away entirely by ``max_length`` are skipped and counted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
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
    """Token ids and prompt-masked labels of one conversation ending with an assistant turn.

    Args:
        tools: tool schemas passed to the chat template (None: a conversation without tools).

    Returns:
        ``{"input_ids", "labels"}`` (lists of equal length <= ``max_length``), or None when
        truncation leaves no target token.
    """
    if not messages or messages[-1]["role"] != "assistant":
        raise ValueError("encode_chat: the last message must be the assistant turn to learn.")
    extra = {"tools": list(tools)} if tools else {}
    prompt = tokenizer.apply_chat_template(
        list(messages[:-1]), tokenize=False, add_generation_prompt=True, **extra
    )
    full = tokenizer.apply_chat_template(list(messages), tokenize=False, **extra)
    if not full.startswith(prompt):
        raise ValueError("encode_chat: the chat template does not render the prompt as a prefix of the chat.")
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    target_ids = tokenizer(full[len(prompt) :], add_special_tokens=False)["input_ids"]
    if len(prompt_ids) >= max_length:
        return None
    input_ids = (prompt_ids + target_ids)[:max_length]
    labels = [IGNORE_INDEX] * len(prompt_ids) + input_ids[len(prompt_ids) :]
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
        mode: ``"chat"`` (loss on the final assistant turn) or ``"pretrain"`` (loss on every token).

    Attributes:
        num_truncated: chat rows skipped because ``max_length`` cut away their whole target.
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

    @classmethod
    def from_parquet(
        cls, path: str | Path, tokenizer: Any, max_length: int, mode: str = "chat"
    ) -> SFTDataset:
        """Load rows from a parquet file (e.g. the ``sft`` split of the synthetic task)."""
        return cls(pd.read_parquet(path).to_dict("records"), tokenizer, max_length, mode)

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
