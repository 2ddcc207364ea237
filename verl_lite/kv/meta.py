"""``KVBatchMeta``: the keys and tags of a batch stored in the KV store, split and merged like a batch.

The controller moves these (a few bytes per row) instead of tensors. Dispatch splits them with
:meth:`chunk` or :meth:`split_by_group` and merges results with :meth:`concat`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from verl_lite.trajectory import group_of
from verl_lite.utils.metrics import Metric, merge_metrics


@dataclass
class KVBatchMeta:
    """Keys (rows) of one partition with their tags and the fields every row holds."""

    keys: list[str]
    """Row keys, in batch order."""
    tags: list[dict] = field(default_factory=list)
    """One tag dict per key (an empty list means "no tags known" and is filled with ``{}``)."""
    partition_id: str = "train"
    """Partition the keys live in."""
    fields: list[str] = field(default_factory=list)
    """Field names every key holds (as far as the producer of this meta knows)."""
    global_step: int = 0
    """The step the batch belongs to: the one its prompts were submitted for, or the one training on it."""
    samples_per_prompt: int = 1
    """Trajectories per prompt group (``rollout.n``), which mini-batches keep together."""
    metrics: dict[str, Metric] = field(default_factory=dict)
    """What the worker that produced this meta measured, under the logged names: ``concat`` merges the
    parts' records; split parts start empty (each part's producer reports its own)."""

    def __post_init__(self) -> None:
        self.keys = list(self.keys)
        self.tags = [dict(t) for t in self.tags] if self.tags else [{} for _ in self.keys]
        if len(self.tags) != len(self.keys):
            raise ValueError(f"KVBatchMeta: {len(self.keys)} keys but {len(self.tags)} tags.")
        self.fields = list(self.fields)

    def __len__(self) -> int:
        return len(self.keys)

    def select(self, indices: Sequence[int]) -> KVBatchMeta:
        """Rows at ``indices`` (in that order), with the same partition, fields, step and samples per prompt."""
        indices = [int(i) for i in indices]
        return KVBatchMeta(
            keys=[self.keys[i] for i in indices],
            tags=[self.tags[i] for i in indices] if indices else [],
            partition_id=self.partition_id,
            fields=self.fields,
            global_step=self.global_step,
            samples_per_prompt=self.samples_per_prompt,
        )

    def with_fields(self, names: Sequence[str]) -> KVBatchMeta:
        """The same rows, now also holding fields ``names`` (no metrics: the caller reports its own)."""
        return replace(self, fields=sorted(set(self.fields) | set(names)), metrics={})

    def chunk(self, n: int) -> list[KVBatchMeta]:
        """Exactly ``n`` contiguous parts whose sizes differ by at most one (some may be empty)."""
        if n < 1:
            raise ValueError(f"KVBatchMeta.chunk: n must be >= 1, got {n}.")
        base, extra = divmod(len(self), n)
        bounds = [0, *itertools.accumulate(base + (i < extra) for i in range(n))]
        return [self.select(range(lo, hi)) for lo, hi in zip(bounds, bounds[1:])]

    def group_ids(self) -> list[str]:
        """Group id of every row (tag ``uid``, else the key prefix before the first ``_``)."""
        return [group_of(key, tag) for key, tag in zip(self.keys, self.tags)]

    def group_uids(self) -> list[str]:
        """The distinct group ids, in the order of their first row."""
        return list(dict.fromkeys(self.group_ids()))

    def split_by_group(self, n: int) -> list[KVBatchMeta]:
        """Exactly ``n`` parts that never split a group, balanced by row count.

        Groups keep the order of their first row and each part takes a contiguous run of groups,
        cut where the running row count is closest to ``i * len(self) / n``; rows of one group are
        gathered together. ``concat`` of the parts therefore restores the original order whenever
        each group's rows were adjacent.
        """
        if n < 1:
            raise ValueError(f"KVBatchMeta.split_by_group: n must be >= 1, got {n}.")
        members: dict[str, list[int]] = {}
        for i, gid in enumerate(self.group_ids()):
            members.setdefault(gid, []).append(i)
        groups = list(members.values())
        bounds = [0, *_balanced_cuts([len(g) for g in groups], n)]
        return [self.select([i for g in groups[lo:hi] for i in g]) for lo, hi in zip(bounds, bounds[1:])]

    @classmethod
    def concat(cls, metas: Sequence[KVBatchMeta]) -> KVBatchMeta:
        """Join metas of one partition in order; fields = those held by every part, step and samples of the first."""
        metas = [m for m in metas if m is not None]
        if not metas:
            raise ValueError("KVBatchMeta.concat: got no metas to concatenate.")
        partitions = {m.partition_id for m in metas}
        if len(partitions) > 1:
            raise ValueError(
                f"KVBatchMeta.concat: metas come from different partitions {sorted(partitions)}."
            )
        non_empty = [m for m in metas if len(m)] or metas[:1]
        fields = [f for f in non_empty[0].fields if all(f in m.fields for m in non_empty[1:])]
        return cls(
            keys=[k for m in metas for k in m.keys],
            tags=[t for m in metas for t in m.tags],
            partition_id=metas[0].partition_id,
            fields=fields,
            global_step=metas[0].global_step,
            samples_per_prompt=metas[0].samples_per_prompt,
            metrics=merge_metrics(m.metrics for m in metas),
        )


def _balanced_cuts(sizes: list[int], n: int) -> list[int]:
    """End index (exclusive) of each of ``n`` contiguous runs of ``sizes``, balancing their sums."""
    cumulative = [0, *itertools.accumulate(sizes)]  # cumulative[i]: sum of sizes[:i]
    ends, end = [], 0
    for part in range(1, n):
        target = cumulative[-1] * part / n
        # Advance while taking the next group brings the cut closer to the target.
        while end < len(sizes) and abs(cumulative[end + 1] - target) <= abs(cumulative[end] - target):
            end += 1
        ends.append(end)
    return [*ends, len(sizes)]
