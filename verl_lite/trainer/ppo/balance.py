"""Sequence-length balancing: reorder rows so each data-parallel rank gets a similar token count."""

from __future__ import annotations

from verl_lite.kv import KVBatchMeta


def balance_by_length(meta: KVBatchMeta, dp_size: int) -> KVBatchMeta:
    """Reorder ``meta`` so its ``dp_size`` contiguous chunks have near-equal total tokens.

    Greedy: longest rows first, each to the lightest chunk that still has room; chunk sizes are
    those of ``meta.chunk(dp_size)``. Lengths come from the tags (``prompt_len + response_len``).
    """
    if dp_size <= 1 or len(meta) <= dp_size:
        return meta
    sizes = [len(part) for part in meta.chunk(dp_size)]
    lengths = [t.get("prompt_len", 0) + t.get("response_len", 0) for t in meta.tags]
    bins: list[list[int]] = [[] for _ in range(dp_size)]
    loads = [0] * dp_size
    for row in sorted(range(len(meta)), key=lambda i: -lengths[i]):
        open_bins = [b for b in range(dp_size) if len(bins[b]) < sizes[b]]
        target = min(open_bins, key=lambda b: loads[b])
        bins[target].append(row)
        loads[target] += lengths[row]
    return meta.select([row for b in bins for row in b])
