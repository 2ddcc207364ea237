"""Right-pad variable-length token rows into a rectangular batch (dynamic padding per mini-batch)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["right_pad"]


def right_pad(rows: Sequence[Sequence[int]], pad_value: int, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """Stack ``rows`` after padding each on the right to the longest row of this batch.

    Args:
        rows: ``batch`` lists (or 1-D tensors) of lengths ``len_i``.
        pad_value: value written after each row's end (pad id, 0 for masks, -100 for labels).

    Returns:
        (batch, max_i len_i) tensor.
    """
    if not rows:
        raise ValueError("right_pad: got an empty batch.")
    max_len = max(len(row) for row in rows)
    out = torch.full((len(rows), max_len), pad_value, dtype=dtype)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.as_tensor(row, dtype=dtype)
    return out
