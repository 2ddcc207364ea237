"""Load RL prompt rows, tokenize them with the chat template, and serve resumable shuffled batches of them.

Rows follow the GSM8K preprocessing schema (``verl_lite.data.synthetic`` writes it)::

    {"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "..."}],
     "reward_model": {"ground_truth": "72"}, "extra_info": {...}, ...}

``RLHFDataset`` reads parquet, jsonl, json (a list of objects) or a folder saved with
``datasets.Dataset.save_to_disk``, from one path or a list (``data.train_files``). Bad rows are
skipped and reported once at load time (``dataset.skipped``) instead of failing mid-run.
``PromptBatches`` draws batches epoch after epoch and can resume exactly where a checkpoint left off.

Prompt ids (uids): the dataset gives each item its source ``index``; ``PromptBatches`` adds
``uid = row_uid(split, epoch, index)``, unique per draw because every row is drawn once per epoch.
A trainer may replace it (e.g. with a per-step counter); GRPO only needs the samples of one prompt
to share a uid that no other prompt of the step uses.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from verl_lite.data.files import DataFiles, read_rows

__all__ = ["TRUNCATION_MODES", "PromptBatches", "RLHFDataset", "row_skip_reason", "row_uid"]

logger = logging.getLogger(__name__)

TRUNCATION_MODES = ("error", "left", "right")


def row_uid(split: str, epoch: int, index: int) -> str:
    """Identifier of one draw of row ``index``: unique across epochs and rows (``"train-2-17"``)."""
    return f"{split}-{epoch}-{index}"


class RLHFDataset(Dataset):
    """Tokenized RL prompts with what the reward needs (data source, ground truth, extra info, row).

    Args:
        data_files: a path or list of paths (see :func:`verl_lite.data.files.read_rows`); None when
            ``rows`` is given.
        tokenizer: a Hugging Face tokenizer with a chat template.
        prompt_key: column holding the prompt: a list of chat messages or a plain string (one user turn).
        max_prompt_length: longest prompt in tokens (data.max_prompt_length).
        filter_overlong_prompts: drop longer prompts at load time (counted in ``skipped``).
        truncation: for longer prompts that are not filtered: ``"error"`` raises, ``"left"`` keeps the
            last ``max_prompt_length`` tokens, ``"right"`` the first.
        default_data_source: ``data_source`` of rows without one.
        agent_name: agent loop of every row, replacing the ``agent_name`` column (None = the column).
        split: name used in uids (``"train"``, ``"val"``).
        chat_template_kwargs: extra arguments of ``apply_chat_template`` (e.g. ``enable_thinking``).
        rows: in-memory rows instead of files.

    Items (``dataset[i]``): ``prompt_ids`` (prompt_len,) LongTensor, ``raw_prompt`` (the templated
    text the ids encode), ``data_source``, ``ground_truth``, ``extra_info`` (dict), ``messages`` (the
    chat before templating), ``agent_name`` (the row's agent loop, None for the configured default),
    ``index`` (the row's position in the concatenated source files, before skipping) and ``row`` (the
    original row).

    Attributes:
        skipped: ``{reason: {"count", "first_index", "first_row"}}`` for reasons ``missing_prompt``,
            ``invalid_prompt``, ``missing_ground_truth`` and ``overlong_prompt``; only reasons that
            occurred appear.
        num_truncated: prompts shortened by ``truncation="left"|"right"``.
    """

    def __init__(
        self,
        data_files: DataFiles | None,
        tokenizer: Any,
        *,
        prompt_key: str = "prompt",
        max_prompt_length: int = 1024,
        filter_overlong_prompts: bool = False,
        truncation: str = "error",
        default_data_source: str = "unknown",
        agent_name: str | None = None,
        split: str = "train",
        chat_template_kwargs: Mapping[str, Any] | None = None,
        rows: Sequence[Mapping[str, Any]] | None = None,
    ):
        if truncation not in TRUNCATION_MODES:
            raise ValueError(
                f"data.truncation={truncation!r} is invalid; use one of {list(TRUNCATION_MODES)}."
            )
        if max_prompt_length <= 0:
            raise ValueError(f"data.max_prompt_length={max_prompt_length} is invalid; use a token count > 0.")
        if (data_files is None) == (rows is None):
            raise ValueError("RLHFDataset: give exactly one of data_files and rows.")
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("RLHFDataset: the tokenizer has no chat_template; prompts are rendered with it.")
        self.tokenizer = tokenizer
        self.prompt_key = prompt_key
        self.max_prompt_length = max_prompt_length
        self.filter_overlong_prompts = filter_overlong_prompts
        self.truncation = truncation
        self.default_data_source = default_data_source
        self.agent_name = agent_name
        self.split = split
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.skipped: dict[str, dict[str, Any]] = {}
        self.num_truncated = 0
        source = read_rows(data_files, key=f"data.{split}_files") if rows is None else rows
        usable = []
        for index, row in enumerate(map(dict, source)):
            reason = row_skip_reason(row, prompt_key)
            if reason is None:
                usable.append((index, row, _as_messages(row[prompt_key])))
            else:
                self._skip(reason, index, row)
        # one batched tokenizer call for every prompt: the fast tokenizer encodes a list in one go
        texts, token_ids = render_prompts(tokenizer, [m for _, _, m in usable], self.chat_template_kwargs)
        self.examples = [
            example
            for (index, row, messages), text, ids in zip(usable, texts, token_ids)
            if (example := self._example(index, row, messages, text, ids)) is not None
        ]
        self._log_skipped(len(source))

    def _example(
        self, index: int, row: dict[str, Any], messages: list[dict[str, Any]], text: str, ids: list[int]
    ) -> dict[str, Any] | None:
        """The stored example of a usable ``row`` rendered as ``text`` / ``ids``, or None (recorded in
        ``skipped``) when it is overlong and overlong prompts are filtered."""
        ground_truth = row["reward_model"]["ground_truth"]
        if len(ids) > self.max_prompt_length:
            if self.filter_overlong_prompts:
                return self._skip("overlong_prompt", index, row)
            ids, text = self._truncate(index, ids)
        return {
            "prompt_ids": ids,
            "raw_prompt": text,
            "data_source": row.get("data_source") or self.default_data_source,
            "ground_truth": ground_truth,
            "extra_info": dict(row.get("extra_info") or {}),
            # what agent loops read: the chat before templating, and the loop chosen for this row
            "messages": messages,
            "agent_name": self.agent_name or row.get("agent_name"),
            "index": index,
            "row": row,
        }

    def _truncate(self, index: int, ids: list[int]) -> tuple[list[int], str]:
        """Cut ``ids`` to ``max_prompt_length`` per ``truncation``; the text is re-decoded to match."""
        if self.truncation == "error":
            raise ValueError(
                f"row {index}: prompt is {len(ids)} tokens, above data.max_prompt_length="
                f"{self.max_prompt_length}; raise the limit, set data.filter_overlong_prompts=true, "
                "or set data.truncation=left|right."
            )
        self.num_truncated += 1
        ids = ids[-self.max_prompt_length :] if self.truncation == "left" else ids[: self.max_prompt_length]
        return ids, self.tokenizer.decode(ids, skip_special_tokens=False)

    def _skip(self, reason: str, index: int, row: dict[str, Any]) -> None:
        entry = self.skipped.setdefault(reason, {"count": 0, "first_index": index, "first_row": row})
        entry["count"] += 1
        return None

    def _log_skipped(self, num_rows: int) -> None:
        if not self.skipped:
            return
        parts = [
            f"{reason}: {entry['count']} (first: row {entry['first_index']} = {_preview(entry['first_row'])})"
            for reason, entry in self.skipped.items()
        ]
        logger.warning(
            "RLHFDataset(%s): kept %d of %d rows; skipped %s.",
            self.split,
            len(self),
            num_rows,
            "; ".join(parts),
        )

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> dict[str, Any]:
        example = self.examples[i]
        return {**example, "prompt_ids": torch.tensor(example["prompt_ids"], dtype=torch.long)}


def render_prompt(
    tokenizer: Any, prompt: Any, chat_template_kwargs: Mapping[str, Any] | None = None
) -> tuple[str, list[int]]:
    """The chat-templated text of a prompt cell (a string or a message list) and its token ids."""
    [text], [ids] = render_prompts(tokenizer, [prompt], chat_template_kwargs)
    return text, ids


def render_prompts(
    tokenizer: Any, prompts: Sequence[Any], chat_template_kwargs: Mapping[str, Any] | None = None
) -> tuple[list[str], list[list[int]]]:
    """``render_prompt`` of many prompt cells, tokenized in one batched call."""
    kwargs = dict(chat_template_kwargs or {})
    texts = [
        tokenizer.apply_chat_template(_as_messages(p), tokenize=False, add_generation_prompt=True, **kwargs)
        for p in prompts
    ]
    return texts, (tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else [])


def row_skip_reason(row: Mapping[str, Any], prompt_key: str = "prompt") -> str | None:
    """Why ``row`` cannot be trained on without tokenizing it (``missing_prompt``, ``invalid_prompt``,
    ``missing_ground_truth``), or None; overlong prompts are only known once tokenized."""
    prompt = row.get(prompt_key)
    if prompt is None or (isinstance(prompt, str | list) and not prompt):
        return "missing_prompt"
    if _as_messages(prompt) is None:
        return "invalid_prompt"
    reward_model = row.get("reward_model")
    ground_truth = reward_model.get("ground_truth") if isinstance(reward_model, Mapping) else None
    return "missing_ground_truth" if ground_truth is None else None


def _as_messages(prompt: Any) -> list[dict[str, Any]] | None:
    """Chat messages of a prompt cell: a string becomes one user turn; None when the cell is malformed."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if not isinstance(prompt, Sequence):
        return None
    messages = [dict(m) for m in prompt if isinstance(m, Mapping)]
    if len(messages) != len(prompt) or any("role" not in m or "content" not in m for m in messages):
        return None
    return messages


def _preview(row: Mapping[str, Any], limit: int = 200) -> str:
    text = repr(dict(row))
    return text if len(text) <= limit else text[:limit] + "...}"


class PromptBatches:
    """Batches of ``RLHFDataset`` items, epoch after epoch, resumable to the exact next batch.

    Epoch ``e`` visits the rows in a fixed order: a permutation drawn from ``random.Random(seed + e)``
    (or the file order when ``shuffle=False``). ``next(batches)`` returns the next batch (a list of
    items, each with ``uid`` and ``epoch`` added) and moves to the next epoch by itself, so the stream
    never ends; the last, smaller batch of an epoch is skipped. ``state_dict()`` records the epoch and how many rows of it were consumed; a fresh ``PromptBatches`` given that
    state returns the same next batch (the batch size may change in between).

    Args:
        dataset: the items to batch (``len`` and ``[i]``; items need ``index``).
        batch_size: prompts per batch (data.train_batch_size).
        shuffle: draw a new permutation each epoch.
        seed: base seed of the permutations.
    """

    def __init__(self, dataset: Any, batch_size: int, shuffle: bool = True, seed: int = 0):
        if batch_size <= 0:
            raise ValueError(f"PromptBatches: batch_size={batch_size} is invalid; use a value > 0.")
        if len(dataset) < batch_size:
            raise ValueError(
                f"PromptBatches: {len(dataset)} rows cannot fill one batch of {batch_size}; "
                "lower the batch size or add data."
            )
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        # rows of the current epoch already returned
        self.position = 0
        self._order_cache: tuple[int, list[int]] | None = None

    def __len__(self) -> int:
        """Batches per epoch."""
        return len(self.dataset) // self.batch_size

    def _epoch_end(self) -> int:
        """Rows of an epoch that are served (the remainder is skipped)."""
        return len(self) * self.batch_size

    def order(self, epoch: int) -> list[int]:
        """Dataset positions in the order epoch ``epoch`` visits them."""
        if self._order_cache is None or self._order_cache[0] != epoch:
            positions = list(range(len(self.dataset)))
            if self.shuffle:
                random.Random(self.seed + epoch).shuffle(positions)
            self._order_cache = (epoch, positions)
        return self._order_cache[1]

    def __iter__(self) -> PromptBatches:
        return self

    def __next__(self) -> list[dict[str, Any]]:
        if self.position >= self._epoch_end():
            self.epoch += 1
            self.position = 0
        positions = self.order(self.epoch)[
            self.position : min(self.position + self.batch_size, self._epoch_end())
        ]
        self.position += len(positions)
        split = getattr(self.dataset, "split", "train")
        batch = []
        for i in positions:
            item = self.dataset[i]
            batch.append({**item, "uid": row_uid(split, self.epoch, item["index"]), "epoch": self.epoch})
        return batch

    def state_dict(self) -> dict[str, Any]:
        """Where the stream stands: ``epoch``, ``position`` (rows consumed in it), ``seed``, ``shuffle``, ``num_rows``."""
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "num_rows": len(self.dataset),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``; the dataset must have as many rows as when it was saved."""
        if state["num_rows"] != len(self.dataset):
            raise ValueError(
                f"PromptBatches: the checkpoint was taken over {state['num_rows']} rows but the dataset now has "
                f"{len(self.dataset)}; resume with the same data files and filters."
            )
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        self.seed = int(state["seed"])
        self.shuffle = bool(state["shuffle"])
        self._order_cache = None
