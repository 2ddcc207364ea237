"""Tokenize preference pairs (chosen vs rejected conversation) for reward-model training, and collate them.

A row is either conversation-form (``chosen`` and ``rejected`` are message lists sharing the prompt)
or string-form (``prompt`` plus ``chosen`` / ``rejected`` answer strings). Each side is rendered with
the chat template and right-truncated to ``max_length``. A long shared prompt can truncate both
answers away; such a pair has identical ids, a constant loss and no gradient, so it is dropped and
counted rather than left-truncated (the reward head needs the prompt).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from .collate import right_pad

__all__ = ["PreferenceDataset", "collate_preference", "pair_messages"]

Messages = list[dict[str, str]]
Pair = dict[str, list[int]]


def pair_messages(row: Mapping[str, Any]) -> tuple[Messages, Messages]:
    """The chosen and rejected conversations of a row in either supported form."""
    chosen, rejected = row["chosen"], row["rejected"]
    if isinstance(chosen, str):
        prompt = [{"role": "user", "content": row["prompt"]}]
        return (
            prompt + [{"role": "assistant", "content": chosen}],
            prompt + [{"role": "assistant", "content": rejected}],
        )
    return [dict(m) for m in chosen], [dict(m) for m in rejected]


def encode_conversation(tokenizer: Any, messages: Messages, max_length: int) -> list[int]:
    """Token ids of a whole conversation rendered with the chat template, cut to ``max_length``."""
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"][:max_length]


class PreferenceDataset(Dataset):
    """Pre-tokenized preference pairs held in memory.

    Attributes:
        num_identical_dropped: pairs dropped because both sides had the same ids after truncation.
    """

    def __init__(self, rows: Iterable[Mapping[str, Any]], tokenizer: Any, max_length: int):
        self.pairs: list[Pair] = []
        self.num_identical_dropped = 0
        for row in rows:
            chosen, rejected = pair_messages(row)
            chosen_ids = encode_conversation(tokenizer, chosen, max_length)
            rejected_ids = encode_conversation(tokenizer, rejected, max_length)
            if chosen_ids == rejected_ids:
                self.num_identical_dropped += 1
                continue
            self.pairs.append({"chosen_input_ids": chosen_ids, "rejected_input_ids": rejected_ids})

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> Pair:
        return self.pairs[index]


def collate_preference(pairs: Sequence[Pair], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-pad the chosen and the rejected sides separately; row ``i`` of both is one pair.

    Returns:
        ``chosen_input_ids``, ``chosen_attention_mask`` (batch, chosen_len) and
        ``rejected_input_ids``, ``rejected_attention_mask`` (batch, rejected_len).
    """
    batch = {}
    for side in ("chosen", "rejected"):
        ids = [pair[f"{side}_input_ids"] for pair in pairs]
        batch[f"{side}_input_ids"] = right_pad(ids, pad_token_id)
        batch[f"{side}_attention_mask"] = right_pad([[1] * len(row) for row in ids], 0)
    return batch
