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


def pack_cells(
    cells: dict[str, tuple[np.ndarray, np.ndarray]], uniform: dict[str, int | None]
) -> dict[str, tuple]:
    """Shrink ``{field: (chunk ids, rows)}``: a field whose cells are all in one chunk (``uniform``:
    field -> that chunk id, else None) sends the id instead of the array, and a field whose cells
    are in the same chunks as an earlier field's names that field instead of repeating the rows
    (a key's row in a chunk is the same for every field the put wrote)."""
    packed: dict[str, tuple] = {}
    by_chunk: dict[int, str] = {}
    mixed: list[tuple[str, np.ndarray]] = []
    for name, (chunk_ids, rows) in cells.items():
        chunk = uniform[name]
        if chunk is not None:
            ids: int | np.ndarray = chunk
            same = by_chunk.setdefault(chunk, name)
        else:
            ids = chunk_ids
            same = next((other for other, o in mixed if np.array_equal(o, chunk_ids)), name)
            if same == name:
                mixed.append((name, chunk_ids))
        packed[name] = (ids, rows if same == name else same)
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
