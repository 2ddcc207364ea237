"""Convert between TensorDicts and the store's numpy columns, and gather rows read back.

A *column* is one field of a put, as :mod:`verl_lite.transport` packs it: ``("dense", array,
dtype_name)``, ``("jagged", values, offsets, dtype_name)`` (one flat values array plus offsets) or
``("rows", list)`` of python values; numpy arrays are what Ray's object store maps zero-copy.
Rows read back are gathered with vectorised indexing, or viewed when they are one run of a column.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from tensordict import NonTensorStack, TensorDict, TensorDictBase

from verl_lite.kv.errors import KVSchemaError
from verl_lite.kv.index import RowSchema
from verl_lite.transport import numpy_to_tensor, pack

DENSE, JAGGED, ROWS = "dense", "jagged", "rows"


def columns_of(td: TensorDictBase) -> dict[str, tuple]:
    """Columns of every field of ``td`` (numpy views of its tensors, no copy)."""
    rows = int(td.batch_size[0]) if td.batch_dims else 0
    columns = {}
    for name, entry in pack(td).fields.items():
        if entry[0] == "data":
            columns[name] = (ROWS, [entry[1]] * rows)
        elif entry[0] == "td":
            raise KVSchemaError(
                f"kv_batch_put: field {name!r} is a nested TensorDict; flatten it first (td.flatten_keys('.'))."
            )
        else:
            columns[name] = entry
    return columns


def schema_of(column: tuple) -> RowSchema:
    """Row schema of a column: what the index checks every later put of the field against."""
    if column[0] == ROWS:
        return RowSchema(False, "object", 0, ())
    if column[0] == DENSE:
        return RowSchema(True, column[2], column[1].ndim - 1, tuple(column[1].shape[2:]))
    return RowSchema(True, column[3], column[1].ndim, tuple(column[1].shape[1:]))


def row_nbytes(column: tuple) -> int | np.ndarray:
    """Bytes of each row: one int when every row has the same size (it travels much lighter than
    an array per key), else an array (python values count as 0: they are small and not tensors)."""
    if column[0] == ROWS:
        return 0
    per_item = column[1].itemsize * math.prod(column[1].shape[1:])
    return per_item if column[0] == DENSE else np.diff(column[2]).astype(np.int64) * per_item


@dataclass
class Source:
    """Rows of one stored column that land at ``positions`` of an output field."""

    column: tuple
    rows: np.ndarray
    positions: np.ndarray


def assemble_field(name: str, n: int, sources: list[Source]) -> object:
    """Output field ``name`` (``n`` rows) from its sources: a dense tensor when every row has the
    same shape and was stored densely, a jagged nested tensor otherwise, a NonTensorStack for
    python values. Rows that are, in output order, one run of one column come back as a view."""
    by_column: dict[int, list[Source]] = {}  # index actors holding rows of one put share its column
    for s in sources:
        by_column.setdefault(id(s.column), []).append(s)
    sources = [
        Source(g[0].column, np.concatenate([s.rows for s in g]), np.concatenate([s.positions for s in g]))
        for g in by_column.values()
    ]
    if len(sources) == 1:
        rows = np.empty(n, dtype=np.int64)
        rows[sources[0].positions] = sources[0].rows
        if np.all(np.diff(rows) == 1):
            return _view(sources[0].column, int(rows[0]), int(rows[-1]) + 1)
    schemas = {schema_of(s.column) for s in sources}
    if len(schemas) > 1:
        raise KVSchemaError(
            f"kv_batch_get: rows of field {name!r} disagree ({' vs '.join(sorted(s.describe() for s in schemas))}); "
            "every row of a field needs the same dtype and trailing shape."
        )
    schema = schemas.pop()
    if not schema.is_tensor:
        values: list = [None] * n
        for s in sources:
            for pos, row in zip(s.positions.tolist(), s.rows.tolist()):
                values[pos] = s.column[1][row]
        return NonTensorStack.from_list(values)
    dense = all(s.column[0] == DENSE for s in sources) and len({s.column[1].shape[1:] for s in sources}) == 1
    if not dense and schema.row_ndim == 0:
        raise KVSchemaError(f"kv_batch_get: field {name!r} holds scalar rows of different shapes.")
    # Gather every row's values into one flat array (dense rows are equal-length jagged rows).
    flats = [_flat(s.column) for s in sources]
    lengths = np.zeros(n, dtype=np.int64)
    for s, (_, offsets) in zip(sources, flats):
        lengths[s.positions] = offsets[s.rows + 1] - offsets[s.rows]
    out_offsets = np.concatenate([[0], np.cumsum(lengths)])
    out = np.empty((int(out_offsets[-1]), *flats[0][0].shape[1:]), dtype=flats[0][0].dtype)
    for s, (values, offsets) in zip(sources, flats):
        seg = lengths[s.positions]
        out[_segments(out_offsets[s.positions], seg)] = values[_segments(offsets[s.rows], seg)]
    if dense:
        return numpy_to_tensor(out.reshape(n, *sources[0].column[1].shape[1:]), schema.dtype_name)
    return torch.nested.nested_tensor_from_jagged(
        numpy_to_tensor(out, schema.dtype_name), torch.from_numpy(out_offsets)
    )


def build_tensordict(n: int, outputs: dict[str, object]) -> TensorDict:
    """A TensorDict of ``n`` rows from assembled fields (non-tensor fields set last, as tensordict needs)."""
    td = TensorDict({k: v for k, v in outputs.items() if isinstance(v, torch.Tensor)}, batch_size=[n])
    for key, value in outputs.items():
        if not isinstance(value, torch.Tensor):
            td.set(key, value)
    return td


def _view(column: tuple, lo: int, hi: int) -> object:
    """Rows ``lo:hi`` of a stored column, without a copy (read-only, like what ``ray.get`` returns)."""
    if column[0] == DENSE:
        return numpy_to_tensor(column[1][lo:hi], column[2])
    if column[0] == ROWS:
        return NonTensorStack.from_list(list(column[1][lo:hi]))
    values, offsets = column[1], column[2]
    start, stop = int(offsets[lo]), int(offsets[hi])
    return torch.nested.nested_tensor_from_jagged(
        numpy_to_tensor(values[start:stop], column[3]), torch.from_numpy(offsets[lo : hi + 1] - start)
    )


def _flat(column: tuple) -> tuple[np.ndarray, np.ndarray]:
    """``(values, offsets)`` of a tensor column; a dense one (scalar rows included) as equal-length rows."""
    if column[0] == JAGGED:
        return column[1], column[2]
    array = column[1] if column[1].ndim > 1 else column[1][:, None]  # scalar rows: length 1
    width = array.shape[1]
    return array.reshape(-1, *array.shape[2:]), np.arange(0, (len(array) + 1) * width, width, dtype=np.int64)


def _segments(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + l)`` for every (start, length) pair, without a Python loop."""
    first = np.cumsum(lengths) - lengths
    return np.repeat(starts - first, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)
