"""Rows for supervised training: hold out a seeded validation split and draw mini-batches."""

from __future__ import annotations

from typing import Any

import numpy as np

from verl_lite.data.files import read_rows
from verl_lite.trainer.sft.config import SupervisedDataConfig

Row = dict[str, Any]


def train_val_rows(rows: list[Row], data: SupervisedDataConfig) -> tuple[list[Row], list[Row]]:
    """``(train, val)``: ``rows`` and the rows of ``data.val_files`` when set, else ``rows`` less a seeded
    random ``data.val_ratio`` of them held out (at least one row when > 0)."""
    if data.val_files:
        return rows, read_rows(data.val_files, key="data.val_files")
    if data.val_ratio <= 0:
        return rows, []
    order = np.random.default_rng(data.seed).permutation(len(rows))
    n_val = max(1, int(round(data.val_ratio * len(rows))))
    val_idx = set(order[:n_val].tolist())
    return [r for i, r in enumerate(rows) if i not in val_idx], [rows[i] for i in sorted(val_idx)]


def epoch_batches(num_rows: int, batch_size: int, shuffle: bool, seed: int, epoch: int) -> list[list[int]]:
    """Row indices of each full mini-batch of one epoch (the last partial batch is dropped)."""
    order = (
        np.random.default_rng([seed, epoch]).permutation(num_rows) if shuffle else np.arange(num_rows)
    ).tolist()
    return [order[i : i + batch_size] for i in range(0, num_rows - batch_size + 1, batch_size)]
