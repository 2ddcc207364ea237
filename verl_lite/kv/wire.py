"""What client and storage units send each other: pickled requests and replies, compact cells.

A request or reply is one ``pickle`` blob (the C pickler; cloudpickle only for values it cannot
handle), sent over the channel (``verl_lite.kv.channel``). Numpy-only, like the unit.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np


def encode(obj: Any) -> bytes:
    """``obj`` as bytes for a unit call or reply."""
    try:
        return pickle.dumps(obj, protocol=5)
    except (pickle.PicklingError, AttributeError, TypeError):
        # A tag or per-row value defined in a script or closure: fall back to cloudpickle.
        from ray import cloudpickle

        return cloudpickle.dumps(obj, protocol=5)


def decode(blob: bytes) -> Any:
    return pickle.loads(blob)


def compact(index: np.ndarray) -> np.ndarray:
    """Row indices in 4 bytes each when they fit (half the bytes on the wire)."""
    return index.astype(np.int32) if len(index) and int(index.max()) < 2**31 else index


def pack_cells(cells: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, tuple]:
    """Shrink ``{field: (chunk ids, rows)}``: one chunk id stands for all rows when they share it,
    and a field whose rows equal an earlier field's (same put) names that field instead."""
    packed: dict[str, tuple] = {}
    seen: list[tuple[str, np.ndarray]] = []
    for name, (chunk_ids, rows) in cells.items():
        ids: int | np.ndarray = (
            int(chunk_ids[0]) if len(chunk_ids) and (chunk_ids == chunk_ids[0]).all() else chunk_ids
        )
        same = next((other for other, r in seen if r is rows or np.array_equal(r, rows)), None)
        if same is None:
            seen.append((name, rows))
        packed[name] = (ids, compact(rows) if same is None else same)
    return packed


def unpack_cells(packed: dict[str, tuple]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Inverse of :func:`pack_cells`."""
    cells: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, (ids, rows) in packed.items():
        rows = cells[rows][1] if isinstance(rows, str) else rows.astype(np.int64, copy=False)
        if not isinstance(ids, np.ndarray):
            ids = np.full(len(rows), ids, dtype=np.int64)
        cells[name] = (ids, rows)
    return cells
