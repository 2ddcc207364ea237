"""Turn TensorDicts into store columns and rows read from the store back into TensorDicts.

A get whose rows of a field are one run of one stored chunk returns a view of that chunk (no
copy); otherwise it copies each source chunk's rows into one output array per field (slices where
rows are contiguous, vectorised fancy indexing otherwise), so the cost per row is numpy's, not
Python's. ``copy=True`` always copies, giving private, writable tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tensordict import NonTensorStack, TensorDict, TensorDictBase

from verl_lite.kv.columns import DENSE, JAGGED, ROWS, RowSchema, is_run, schema_of, segment_indices
from verl_lite.kv.errors import KVSchemaError
from verl_lite.transport import numpy_to_tensor, pack

PAD_MASK_SUFFIX = "_pad_mask"
"""``kv_batch_get(..., padded=True)`` adds ``{field}_pad_mask`` (bool, True on real tokens) per padded field."""


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


@dataclass
class Source:
    """Rows of one stored column that land at ``positions`` of an output field."""

    column: tuple
    rows: np.ndarray
    positions: np.ndarray


def assemble_field(
    name: str, n: int, sources: list[Source], padded: bool = False, pad_value: float = 0, copy: bool = True
) -> dict[str, object]:
    """Build output field ``name`` (``n`` rows) from its sources; returns ``{name: value}`` (+ pad mask).

    Rows of equal shape stored densely come back dense; otherwise the field comes back as a jagged
    nested tensor, or right-padded with a ``{name}_pad_mask`` field when ``padded``. Without
    ``copy``, rows that are one run of one source come back as a view of it (no copy at all).
    """
    sources = _merge(sources)
    if not copy and len(sources) == 1 and len(sources[0].rows) == n and n:
        view = _view(name, sources[0], padded)
        if view is not None:
            return view
    schemas = {schema_of(s.column) for s in sources}
    if len(schemas) > 1:
        described = " vs ".join(sorted(s.describe() for s in schemas))
        raise KVSchemaError(
            f"kv_batch_get: rows of field {name!r} disagree ({described}); every row of a field needs "
            "the same dtype and trailing shape."
        )
    schema = schemas.pop()
    if not schema.is_tensor:
        values: list = [None] * n
        for s in sources:
            for pos, row in zip(s.positions.tolist(), s.rows.tolist()):
                values[pos] = s.column[1][row]
        return {name: NonTensorStack.from_list(values)}
    shapes = {s.column[1].shape[1:] for s in sources if s.column[0] == DENSE}
    if all(s.column[0] == DENSE for s in sources) and len(shapes) == 1:
        return {name: numpy_to_tensor(_assemble_dense(n, sources), schema.dtype_name)}
    return _assemble_jagged(name, n, sources, schema, padded, pad_value)


def _merge(sources: list[Source]) -> list[Source]:
    """One source per stored column: units that hold rows of the same put share its column."""
    if len(sources) < 2:
        return sources
    by_column: dict[int, list[Source]] = {}
    for s in sources:
        by_column.setdefault(id(s.column), []).append(s)
    if len(by_column) == len(sources):
        return sources
    return [
        group[0]
        if len(group) == 1
        else Source(
            group[0].column,
            np.concatenate([s.rows for s in group]),
            np.concatenate([s.positions for s in group]),
        )
        for group in by_column.values()
    ]


def _view(name: str, source: Source, padded: bool) -> dict[str, object] | None:
    """``{name: tensor}`` viewing the source's rows when, in output order, they are one run."""
    rows = np.empty(len(source.rows), dtype=np.int64)
    rows[source.positions] = source.rows
    if not is_run(rows):
        return None
    return view_rows(name, source.column, int(rows[0]), int(rows[-1]) + 1, padded)


def view_rows(name: str, column: tuple, lo: int, hi: int, padded: bool) -> dict[str, object] | None:
    """``{name: tensor}`` viewing rows ``lo:hi`` of a stored column without a copy; None where a
    view cannot give the requested layout (padded jagged rows)."""
    kind = column[0]
    if kind == DENSE:
        return {name: numpy_to_tensor(column[1][lo:hi], column[2])}
    if kind == JAGGED and not padded:
        values, offsets = column[1], column[2]
        start, stop = int(offsets[lo]), int(offsets[hi])
        return {
            name: torch.nested.nested_tensor_from_jagged(
                numpy_to_tensor(values[start:stop], column[3]), torch.from_numpy(offsets[lo : hi + 1] - start)
            )
        }
    if kind == ROWS:
        return {name: NonTensorStack.from_list(list(column[1][lo:hi]))}
    return None


def _assemble_dense(n: int, sources: list[Source]) -> np.ndarray:
    first = sources[0].column[1]
    out = np.empty((n, *first.shape[1:]), dtype=first.dtype)
    for s in sources:
        array, rows, positions = s.column[1], s.rows, s.positions
        # One copy per source: slice whichever side is contiguous.
        if is_run(rows):
            block = array[rows[0] : rows[0] + len(rows)]
            if is_run(positions):
                out[positions[0] : positions[0] + len(positions)] = block
            else:
                out[positions] = block
        elif is_run(positions):
            np.take(array, rows, axis=0, out=out[positions[0] : positions[0] + len(positions)])
        else:
            out[positions] = np.take(array, rows, axis=0)
    return out


def _flat_view(column: tuple) -> tuple[np.ndarray, np.ndarray]:
    """``(values, offsets)`` of a tensor column, treating a dense one as equal-length rows."""
    if column[0] == JAGGED:
        return column[1], column[2]
    array = column[1]
    length = array.shape[1]
    offsets = np.arange(0, (len(array) + 1) * length, length, dtype=np.int64)
    return array.reshape(len(array) * length, *array.shape[2:]), offsets


def _assemble_jagged(
    name: str, n: int, sources: list[Source], schema: RowSchema, padded: bool, pad_value: float
) -> dict[str, object]:
    if schema.row_ndim == 0:
        raise KVSchemaError(f"kv_batch_get: field {name!r} holds scalar rows of different shapes.")
    views = [_flat_view(s.column) for s in sources]
    lengths = np.zeros(n, dtype=np.int64)
    for s, (_, offsets) in zip(sources, views):
        lengths[s.positions] = offsets[s.rows + 1] - offsets[s.rows]
    dtype = views[0][0].dtype
    if padded:
        width = int(lengths.max()) if n else 0
        out = np.full((n * width, *schema.trailing), pad_value, dtype=dtype)
        out_starts = np.arange(n, dtype=np.int64) * width
    else:
        out_offsets = np.concatenate([[0], np.cumsum(lengths)])
        out = np.empty((int(out_offsets[-1]), *schema.trailing), dtype=dtype)
        out_starts = out_offsets[:-1]
    for s, (values, offsets) in zip(sources, views):
        seg_lengths = lengths[s.positions]
        src = segment_indices(offsets[s.rows], seg_lengths)
        dst = segment_indices(out_starts[s.positions], seg_lengths)
        if len(src) and is_run(src) and is_run(dst):
            out[dst[0] : dst[0] + len(dst)] = values[src[0] : src[0] + len(src)]
        else:
            out[dst] = values[src]
    if padded:
        mask = np.arange(width)[None, :] < lengths[:, None]
        tensor = numpy_to_tensor(out.reshape(n, width, *schema.trailing), schema.dtype_name)
        return {name: tensor, name + PAD_MASK_SUFFIX: torch.from_numpy(mask)}
    values_t = numpy_to_tensor(out, schema.dtype_name)
    return {name: torch.nested.nested_tensor_from_jagged(values_t, torch.from_numpy(out_offsets))}


def build_tensordict(n: int, outputs: dict[str, object]) -> TensorDict:
    """A TensorDict of ``n`` rows from assembled fields (non-tensor fields set last, as tensordict needs)."""
    tensors = {k: v for k, v in outputs.items() if isinstance(v, torch.Tensor)}
    td = TensorDict(tensors, batch_size=[n])
    for key, value in outputs.items():
        if not isinstance(value, torch.Tensor):
            td.set(key, value)
    return td
