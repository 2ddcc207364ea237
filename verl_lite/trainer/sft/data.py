"""Rows for supervised training: read parquet/jsonl files and hold out a seeded validation split."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd

Row = dict[str, Any]


def read_rows(files: str | list[str]) -> list[Row]:
    """All rows of one or more parquet / jsonl files, in file order."""
    rows: list[Row] = []
    for path in files if isinstance(files, list) else [files]:
        ext = os.path.splitext(path)[1]
        if ext == ".parquet":
            frame = pd.read_parquet(path)
        elif ext in (".jsonl", ".json"):
            frame = pd.read_json(path, lines=ext == ".jsonl")
        else:
            raise ValueError(f"data file {path!r}: expected a .parquet, .jsonl or .json file.")
        rows.extend(frame.to_dict("records"))
    return rows


def split_rows(rows: list[Row], val_ratio: float, seed: int) -> tuple[list[Row], list[Row]]:
    """``(train, val)``: a seeded random ``val_ratio`` of ``rows`` is held out (at least one row when > 0)."""
    if val_ratio <= 0:
        return rows, []
    order = np.random.default_rng(seed).permutation(len(rows))
    n_val = max(1, int(round(val_ratio * len(rows))))
    val_idx = set(order[:n_val].tolist())
    return [r for i, r in enumerate(rows) if i not in val_idx], [rows[i] for i in sorted(val_idx)]


def epoch_batches(num_rows: int, batch_size: int, shuffle: bool, seed: int, epoch: int) -> list[list[int]]:
    """Row indices of each full mini-batch of one epoch (the last partial batch is dropped)."""
    order = (
        np.random.default_rng([seed, epoch]).permutation(num_rows) if shuffle else np.arange(num_rows)
    ).tolist()
    return [order[i : i + batch_size] for i in range(0, num_rows - batch_size + 1, batch_size)]
