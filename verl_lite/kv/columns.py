"""The numpy column format of stored rows: row schemas, sizes, and selecting rows.

A *column* is one field of a chunk of rows, in the wire format of :mod:`verl_lite.transport`:
``("dense", array (rows, *row_shape), dtype_name)``, ``("jagged", values (total, *trailing),
offsets (rows + 1,), dtype_name)`` or, for per-row python values, ``("rows", list)``. This module
needs only numpy, so storage units never import torch. Rows are selected with vectorised index
arithmetic (one gather per field and unit, a view where the rows are contiguous).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

DENSE, JAGGED, ROWS = "dense", "jagged", "rows"


class RowSchema(NamedTuple):
    """What every row of a field must agree on: kind class, dtype and the shape after the length dim.

    A tuple, so it travels to the units as a plain tuple (no class to look up when unpickled).
    """

    is_tensor: bool
    dtype_name: str
    row_ndim: int
    trailing: tuple[int, ...]

    def describe(self) -> str:
        if not self.is_tensor:
            return "python values"
        dims = ("L", *self.trailing)[: self.row_ndim] if self.row_ndim else ()
        return f"{self.dtype_name.removeprefix('torch.')} rows of shape ({', '.join(map(str, dims))})"


def schema_of(column: tuple) -> RowSchema:
    """Row schema of a column (see module docstring for the column formats)."""
    kind = column[0]
    if kind == ROWS:
        return RowSchema(False, "object", 0, ())
    if kind == DENSE:
        array = column[1]
        return RowSchema(True, column[2], array.ndim - 1, tuple(array.shape[2:]))
    values = column[1]
    return RowSchema(True, column[3], values.ndim, tuple(values.shape[1:]))


def row_nbytes(column: tuple) -> np.ndarray:
    """Bytes of each row of a column (python values count as 0: they are small and not tensors)."""
    kind = column[0]
    if kind == ROWS:
        return np.zeros(len(column[1]), dtype=np.int64)
    if kind == DENSE:
        array = column[1]
        per_row = array.itemsize * math.prod(array.shape[1:])
        return np.full(len(array), per_row, dtype=np.int64)
    values, offsets = column[1], column[2]
    per_item = values.itemsize * math.prod(values.shape[1:])
    return np.diff(offsets).astype(np.int64) * per_item


def segment_indices(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + l)`` for every (start, length) pair, without a Python loop."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    first = np.cumsum(lengths) - lengths
    return np.repeat(starts - first, lengths) + np.arange(total, dtype=np.int64)


def take_rows(column: tuple, rows: np.ndarray) -> tuple:
    """A column holding only ``rows`` of ``column``, in that order (a view when they are a run)."""
    kind = column[0]
    run = is_run(rows)
    if kind == ROWS:
        return (ROWS, column[1][rows[0] : rows[-1] + 1] if run else [column[1][i] for i in rows.tolist()])
    if kind == DENSE:
        return (
            DENSE,
            column[1][rows[0] : rows[-1] + 1] if run else np.take(column[1], rows, axis=0),
            column[2],
        )
    values, offsets = column[1], column[2]
    if run:
        lo, hi = offsets[rows[0]], offsets[rows[-1] + 1]
        return (JAGGED, values[lo:hi], offsets[rows[0] : rows[-1] + 2] - lo, column[3])
    lengths = offsets[rows + 1] - offsets[rows]
    new_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return (JAGGED, values[segment_indices(offsets[rows], lengths)], new_offsets, column[3])


def is_run(index: np.ndarray) -> bool:
    """True when ``index`` is ``start, start + 1, ...`` (a slice can replace fancy indexing)."""
    if len(index) == 0:
        return False
    return int(index[-1]) - int(index[0]) == len(index) - 1 and bool(np.all(np.diff(index) == 1))


def cell_nbytes(column: tuple) -> int | np.ndarray:
    """Bytes of each row of a column: one int when every row has the same size, else an array."""
    if column[0] == ROWS:
        return 0
    if column[0] == DENSE:
        array = column[1]
        return array.itemsize * math.prod(array.shape[1:])
    return row_nbytes(column)
