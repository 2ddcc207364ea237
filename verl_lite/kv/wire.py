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


def pack_keys(keys: list[str]) -> str | bytes:
    """A key list for a unit call: the keys joined by NUL (one string: cheaper to build, send and
    split than a pickled list), or the pickled list when a key itself contains NUL."""
    joined = "\0".join(keys)
    if joined.count("\0") == len(keys) - 1:
        return joined
    return encode(keys)


def unpack_keys(packed: str | bytes) -> list[str]:
    """Inverse of :func:`pack_keys` (for a non-empty key list)."""
    return packed.split("\0") if isinstance(packed, str) else decode(packed)


def compact(index: np.ndarray) -> np.ndarray:
    """Row indices in 4 bytes each when they fit (half the bytes on the wire)."""
    return index.astype(np.int32) if len(index) and int(index.max()) < 2**31 else index


def pack_cells(cells: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, tuple]:
    """Shrink ``{field: (chunk ids, rows)}``: one chunk id stands for all rows when they share it,
    and a field whose cells are in the same chunks as an earlier field's names that field instead
    of repeating the rows (a key's row in a chunk is the same for every field the put wrote)."""
    packed: dict[str, tuple] = {}
    by_chunk: dict[int, str] = {}
    mixed: list[tuple[str, np.ndarray]] = []
    for name, (chunk_ids, rows) in cells.items():
        lo = int(chunk_ids.min()) if len(chunk_ids) else 0
        if len(chunk_ids) and lo == int(chunk_ids.max()):
            ids: int | np.ndarray = lo
            same = by_chunk.setdefault(lo, name)
        else:
            ids = chunk_ids
            same = next((other for other, o in mixed if np.array_equal(o, chunk_ids)), name)
            if same == name:
                mixed.append((name, chunk_ids))
        packed[name] = (ids, compact(rows) if same == name else same)
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
