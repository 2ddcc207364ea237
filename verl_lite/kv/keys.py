"""Which index actor of the KV store holds a key."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np


def index_of_keys(keys: Sequence[str], num_indexes: int) -> np.ndarray:
    """Index actor of each key: a CRC32 of the key modulo ``num_indexes`` (stable across processes)."""
    crcs = np.fromiter(map(zlib.crc32, map(str.encode, keys)), dtype=np.int64, count=len(keys))
    return crcs % num_indexes
