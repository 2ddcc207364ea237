"""Arrays that ``ray.put`` copies in 1 MiB pieces and that ``ray.get`` returns whole again.

Ray copies every buffer above 1 MiB into the object store with 6 threads it spawns for that one
copy. On a node with fewer cores than those threads, for buffers of a few MiB the spawning
costs more than the threads save, and they crowd out every other process while they run (here,
2 cores: a 2 MiB array puts in ~0.9 ms as 1 MiB pieces against ~1.1 ms whole, 4 MiB in ~1.2
against ~1.4; at 8 MiB both take ~1.7 ms and above it the threads win: ``bench/kv_store.py
--pieces`` measures it). So there a stored column's arrays of up to :data:`PIECES_UP_TO` bytes
travel as 1 MiB pieces, each copied by a plain ``memcpy``. On larger nodes the threads run side
by side and likely win at every size (not measured here), so arrays go whole.

Ray lays the buffers of one object out back to back (64-byte aligned, which 1 MiB pieces are),
so :func:`joined` returns the pieces as one zero-copy view of the stored object; should the
layout ever differ, it copies them into one array instead. Numpy-only: units unpickle it too.
"""

from __future__ import annotations

import os

import numpy as np

PIECE_BYTES = 1 << 20
"""Bytes per piece: Ray's threshold for its threaded copy (buffers of at most this use memcpy)."""


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


PIECES_UP_TO = 4 << 20 if _usable_cores() < 8 else 0
"""Largest array sent in pieces: 4 MiB where this process may use fewer than 8 cores (Ray's 6
copy threads and the caller cannot all run at once), else 0 (arrays always go whole)."""


class InPieces:
    """Wraps an array so that pickling it for ``ray.put`` yields 1 MiB pieces (see module doc)."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray):
        self.array = array

    def __reduce__(self) -> tuple:
        flat = self.array.reshape(-1).view(np.uint8)
        pieces = [flat[start : start + PIECE_BYTES] for start in range(0, flat.size, PIECE_BYTES)]
        return joined, (self.array.dtype.str, self.array.shape, pieces)


def in_pieces(columns: dict[str, tuple], up_to: int = PIECES_UP_TO) -> dict[str, tuple]:
    """``columns`` with every contiguous array of more than 1 MiB and at most ``up_to`` bytes
    wrapped in :class:`InPieces` (for ``ray.put``; no copy)."""
    if up_to <= PIECE_BYTES:
        return columns

    def wrapped(value: object) -> object:
        if isinstance(value, np.ndarray) and PIECE_BYTES < value.nbytes <= up_to and value.flags.c_contiguous:
            return InPieces(value)
        return value

    return {name: tuple(map(wrapped, column)) for name, column in columns.items()}


def joined(dtype: str, shape: tuple[int, ...], pieces: list[np.ndarray]) -> np.ndarray:
    """The array ``pieces`` (uint8, in order) hold: a read-only view when they are adjacent in
    memory, as Ray stores them, else a copy."""
    start = pieces[0].__array_interface__["data"][0]
    end = start
    for piece in pieces:
        if piece.__array_interface__["data"][0] != end:
            whole = np.concatenate(pieces)
            break
        end += piece.nbytes
    else:
        whole = np.lib.stride_tricks.as_strided(pieces[0], shape=(end - start,), writeable=False)
    return whole.view(np.dtype(dtype)).reshape(shape)
