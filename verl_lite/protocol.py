"""Batch operations on ``tensordict.TensorDict``: the shapes every floor passes around.

A batch is a TensorDict whose first batch dimension indexes rows (prompts or trajectories).
Variable-length fields are jagged nested tensors (``torch.nested``, ``layout=torch.jagged``);
per-row python values (uids, ground truths, data sources) are ``NonTensorStack`` fields.
These helpers keep all of them aligned when a batch is split, padded or joined.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase


def batch_len(td: TensorDictBase) -> int:
    """Number of rows in ``td`` (its first batch dimension)."""
    return int(td.batch_size[0]) if td.batch_dims else 0


def chunk(td: TensorDictBase, chunks: int) -> list[TensorDictBase]:
    """Split ``td`` into ``chunks`` contiguous parts whose sizes differ by at most one row.

    Unlike ``torch.chunk`` this always returns exactly ``chunks`` parts (some may be empty when
    there are fewer rows than chunks), so part ``i`` can be sent to data-parallel rank ``i``.
    """
    if chunks < 1:
        raise ValueError(f"chunk: chunks must be >= 1, got {chunks}.")
    n = batch_len(td)
    base, extra = divmod(n, chunks)
    sizes = [base + (1 if i < extra else 0) for i in range(chunks)]
    parts, start = [], 0
    for size in sizes:
        parts.append(td[start : start + size])
        start += size
    return parts


def concat(tds: Sequence[TensorDictBase]) -> TensorDictBase:
    """Concatenate batches along rows; jagged and non-tensor fields are kept row-aligned."""
    tds = [td for td in tds if td is not None]
    if not tds:
        raise ValueError("concat: got no batches to concatenate.")
    if len(tds) == 1:
        return tds[0]
    keys = [set(td.keys()) for td in tds]
    if any(k != keys[0] for k in keys):
        raise ValueError(
            f"concat: batches have different fields: {[sorted(k) for k in keys]}; every batch needs the same keys."
        )
    return torch.cat(list(tds), dim=0)


def pad_to_divisor(td: TensorDictBase, divisor: int) -> tuple[TensorDictBase, int]:
    """Append copies of the first rows until the row count divides by ``divisor``.

    Returns:
        ``(padded, pad_size)``; pass ``pad_size`` to :func:`unpad` to strip the extra rows from
        a result computed on the padded batch.
    """
    if divisor < 1:
        raise ValueError(f"pad_to_divisor: divisor must be >= 1, got {divisor}.")
    n = batch_len(td)
    pad_size = (-n) % divisor
    if pad_size == 0:
        return td, 0
    if n == 0:
        raise ValueError("pad_to_divisor: cannot pad an empty batch.")
    index = torch.arange(pad_size) % n
    return concat([td, td[index]]), pad_size


def unpad(td: TensorDictBase, pad_size: int) -> TensorDictBase:
    """Drop the last ``pad_size`` rows added by :func:`pad_to_divisor`."""
    return td if pad_size == 0 else td[: batch_len(td) - pad_size]


def to_jagged(rows: Sequence[torch.Tensor | Sequence], dtype: torch.dtype | None = None) -> torch.Tensor:
    """Build a jagged nested tensor from 1-D (or (len, ...)) rows of different lengths.

    Rows may be tensors or lists of numbers (converted in one call, as ``dtype``), laid end to end
    and cut by offsets.
    """
    if not rows:
        raise ValueError("to_jagged needs at least one row.")
    if isinstance(rows[0], torch.Tensor):
        tensors = [torch.as_tensor(r, dtype=dtype) for r in rows]
        lengths = [t.shape[0] for t in tensors]
        values = torch.cat(tensors)
    else:
        lengths = [len(r) for r in rows]
        values = torch.tensor([x for r in rows for x in r], dtype=dtype)
    return _cut_into_rows(values, torch.tensor(lengths, dtype=torch.long))


def _cut_into_rows(values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The jagged tensor whose consecutive rows are ``values`` cut at the (batch,) ``lengths``."""
    offsets = torch.zeros(len(lengths) + 1, dtype=torch.long)
    torch.cumsum(lengths, dim=0, out=offsets[1:])
    return torch.nested.nested_tensor_from_jagged(values, offsets)


def padded_from_jagged(
    jagged: torch.Tensor, pad_value: float = 0, max_len: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad a jagged tensor; returns ``(padded (batch, max_len, ...), mask (batch, max_len))``.

    ``max_len`` pads further than the longest row (for fixed shapes); it must not cut rows.
    """
    offsets = jagged.offsets()
    lengths = offsets.diff()
    longest = int(lengths.max()) if len(lengths) else 0
    width = longest if max_len is None else max_len
    if width < longest:
        raise ValueError(
            f"padded_from_jagged: max_len={max_len} is shorter than the longest row ({longest})."
        )
    values = jagged.values()
    padded = values.new_full((len(lengths), width, *values.shape[1:]), pad_value)
    mask = torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)
    padded[mask] = values
    return padded, mask
