"""An index actor: the Ray actor that holds one shard of the KV store's keys, tags and row locations.

Column data never passes through it: a writer ``ray.put``s its columns and sends the reference
with the put; each index actor holding keys of that put keeps it (Ray counts a borrower) and, per
field and key, ``(object id, row)``. When no key uses an object any more the actor drops the
reference and Ray frees the object. Objects belong to their writer's process: reading rows of a
writer that exited raises ``KVStoreError``. Bookkeeping is vectorised (a slot per key, numpy
arrays per field indexed by slot); the actor runs one call at a time, so each call is atomic.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import NamedTuple

import numpy as np

from verl_lite.kv.errors import KVFieldError, KVKeyError, KVSchemaError, preview

_ABSENT = -1
_MIN_SLOTS = 64


class RowSchema(NamedTuple):
    """What every row of a field must agree on: tensor or python value, dtype, and trailing shape."""

    is_tensor: bool
    dtype_name: str
    row_ndim: int
    trailing: tuple[int, ...]

    def describe(self) -> str:
        """Human-readable form for error messages, e.g. ``int64 rows of shape (L)``."""
        if not self.is_tensor:
            return "python values"
        dims = ("L", *self.trailing)[: self.row_ndim] if self.row_ndim else ()
        return f"{self.dtype_name.removeprefix('torch.')} rows of shape ({', '.join(map(str, dims))})"


class _Field:
    """Per slot: the object holding the row (``-1``: absent), the row in it, and its bytes."""

    def __init__(self, schema: RowSchema, capacity: int):
        self.schema, self.obj = schema, np.full(capacity, _ABSENT)
        self.row, self.nbytes = np.zeros(capacity, int), np.zeros(capacity, int)

    def grow(self, capacity: int) -> None:
        pad = (0, capacity - len(self.obj))
        self.obj = np.pad(self.obj, pad, constant_values=_ABSENT)
        self.row, self.nbytes = np.pad(self.row, pad), np.pad(self.nbytes, pad)


class _Partition:
    """Keys of one partition on this actor: key -> slot, tags by slot, fields by name."""

    def __init__(self) -> None:
        self.slots: dict[str, int] = {}  # insertion order = key order of listings
        self.tags: list[dict | None] = []  # None: no tag yet (most puts bring none; no dict per key)
        self.free: list[int] = []  # slots of cleared keys, reused first
        self.fields: dict[str, _Field] = {}
        self.nbytes = 0

    def slots_for(self, keys: list[str]) -> np.ndarray:
        """Slots of ``keys``, creating the keys that are new (in slots of cleared keys first)."""
        held = list(map(self.slots.get, keys))
        if missing := held.count(None):
            reuse, start = min(missing, len(self.free)), len(self.tags)
            fresh = self.free[len(self.free) - reuse :] + list(range(start, start + missing - reuse))
            del self.free[len(self.free) - reuse :]
            self.tags.extend([None] * (missing - reuse))
            if missing == len(keys):  # all new, as rollouts write
                held = fresh
            else:
                for i, slot in zip([i for i, s in enumerate(held) if s is None], fresh):
                    held[i] = slot
            self.slots.update(zip(keys, held))
            for f in self.fields.values():
                if len(f.obj) < len(self.tags):
                    f.grow(max(2 * len(f.obj), len(self.tags)))
        return np.asarray(held, dtype=np.int64)

    def merge_tags(self, slots: np.ndarray, tags: list[dict]) -> list[dict]:
        """Merge ``tags`` into the tags of ``slots``; returns their tags after the merge."""
        for slot, tag in zip(slots.tolist(), tags):
            self.tags[slot] = {**(self.tags[slot] or {}), **tag}
        return [self.tags[s] for s in slots.tolist()]

    def key_fields(self, slot: int) -> list[str]:
        return [name for name, f in self.fields.items() if f.obj[slot] != _ABSENT]

    def common_fields(self, slots: np.ndarray) -> list[str]:
        return [name for name, f in self.fields.items() if (f.obj[slots] != _ABSENT).all()]


class IndexActor:
    """Holds the keys of a store that hash to it (see the module docstring)."""

    def __init__(self, store_id: str, config: dict, owner: str):
        # owner: Ray worker id of the process that started the store (its exit ends the actor)
        self.info = {"store_id": store_id, "config": config, "owner": owner}
        self.kept = False  # emptied by a run that ended, for the next store of the same config
        self._empty()

    def _empty(self) -> None:
        self._partitions: dict[str, _Partition] = {}
        self._objects: dict[int, list] = {}  # object id -> [ObjectRef, bytes, live cells]
        self._next_object = 0
        self._io = defaultdict(lambda: Counter(puts=0, gets=0, bytes_written=0, bytes_read=0))

    def describe(self) -> dict:
        """Store identity and config, from which ``get_kv_client`` builds a client."""
        return self.info

    def keep(self) -> None:
        """Drop every key, tag, reference and count, and wait, kept, for ``take`` or ``end_if_kept``."""
        self._empty()
        self.kept = True

    def take(self, config: dict, store_id: str, owner: str) -> bool:
        """Serve a new store ``store_id`` with ``config`` if kept with that config by the process
        ``owner`` (Ray worker id) that started this actor and whose exit would end it (False otherwise)."""
        if not self.kept or config != self.info["config"] or owner != self.info["owner"]:
            return False
        self._empty()  # what a client of the closed store still sent meanwhile
        self.kept, self.info["store_id"] = False, store_id
        return True

    def end_if_kept(self) -> bool:
        """Whether the actor was kept (it is not any more, so nothing takes it before it is ended)."""
        was, self.kept = self.kept, False
        return was

    def put(
        self,
        partition_id: str,
        keys: list[str],
        tags: list[dict] | None,
        specs: dict[str, tuple[tuple, int | np.ndarray]],
        boxed_ref: list | None,
        rows: np.ndarray | None,
        client: str,
    ) -> dict:
        """Create or extend ``keys``, merge ``tags`` and (over)write the fields
        in ``specs`` (field -> ``(row schema, bytes of each row or one int for all)``): rows ``rows``
        (None: ``0..len(keys)-1``) of the object in ``boxed_ref`` (``[ObjectRef]``: boxed, so
        that Ray passes the reference, not the value)."""
        part = self._partitions.get(partition_id)
        for name, (schema, _) in specs.items():
            f = part.fields.get(name) if part is not None else None
            if f is not None and f.schema != schema and (f.obj != _ABSENT).any():
                raise KVSchemaError(
                    f"kv_batch_put: field {name!r} in partition {partition_id!r} holds {f.schema.describe()}, "
                    f"but the put for key {keys[0]!r} brings {RowSchema(*schema).describe()}; every row of a "
                    "field needs the same dtype and trailing shape."
                )
        part = self._partitions.setdefault(partition_id, _Partition())
        slots = part.slots_for(keys)
        merged = part.merge_tags(slots, tags) if tags is not None else None
        self._io[client]["puts"] += 1
        if specs:
            obj, self._next_object = self._next_object, self._next_object + 1
            specs = {name: (schema, np.broadcast_to(b, len(keys))) for name, (schema, b) in specs.items()}
            total = sum(int(row_bytes.sum()) for _, row_bytes in specs.values())
            self._objects[obj] = [boxed_ref[0], total, len(keys) * len(specs)]
            self._io[client]["bytes_written"] += total
            part.nbytes += total
            released, rows = [], np.arange(len(keys)) if rows is None else rows
            for name, (schema, row_bytes) in specs.items():
                f = part.fields.get(name)
                if f is None or f.schema != schema:  # new, or every row of it was cleared
                    f = part.fields[name] = _Field(RowSchema(*schema), max(len(part.tags), _MIN_SLOTS))
                old = f.obj[slots]
                released.append(old[old != _ABSENT])
                part.nbytes -= int(f.nbytes[slots][old != _ABSENT].sum())
                f.obj[slots], f.row[slots], f.nbytes[slots] = obj, rows, row_bytes
            self._release(np.concatenate(released))
        return {"tags": merged, "fields": part.common_fields(slots)}

    def get(self, partition_id: str, keys: list[str], fields: list[str] | None, client: str) -> dict:
        """Where the rows of ``fields`` (every field the keys hold when None) are: per field
        ``(object ids, rows)`` (each compacted, see :func:`_compact`), and ``refs``: object id ->
        ObjectRef, which the reader ``ray.get``s."""
        part, slots = self._existing(partition_id, keys, "kv_batch_get")
        names = fields  # without select_fields: every field any key holds, which all of them must hold
        if names is None:
            names = [n for n, f in part.fields.items() if (f.obj[slots] != _ABSENT).any()]
        cells, objects, nbytes = {}, set(), 0
        for name in names:
            f = part.fields.get(name)
            obj = f.obj[slots] if f is not None else np.full(len(slots), _ABSENT)
            if (obj == _ABSENT).any():
                i = int(np.argmax(obj == _ABSENT))
                raise KVFieldError(
                    f"kv_batch_get: field {name!r} is missing for key {keys[i]!r} in partition {partition_id!r}; "
                    f"the key holds {part.key_fields(slots[i])}"
                    + ("; pass select_fields." if fields is None else ".")
                )
            cells[name] = (_compact(obj, 0), _compact(f.row[slots], 1))
            objects.update(np.unique(obj).tolist())
            nbytes += int(f.nbytes[slots].sum())
        self._io[client]["gets"] += 1
        self._io[client]["bytes_read"] += nbytes
        refs = {o: self._objects[o][0] for o in objects}
        return {"fields": names, "cells": cells, "refs": refs, "nbytes": nbytes}

    def clear(self, partition_id: str, keys: list[str] | None) -> int:
        """Delete ``keys`` (every key of the partition when None); missing keys are ignored."""
        part = self._partitions.get(partition_id)
        if part is None:
            return 0
        keys = list(part.slots) if keys is None else [k for k in keys if k in part.slots]
        if not keys:
            return 0
        slots = np.fromiter(map(part.slots.pop, keys), dtype=np.int64, count=len(keys))
        released = []
        for f in part.fields.values():
            held = f.obj[slots] != _ABSENT
            released.append(f.obj[slots][held])
            part.nbytes -= int(f.nbytes[slots][held].sum())
            f.obj[slots] = _ABSENT
        self._release(np.concatenate(released or [np.zeros(0, dtype=np.int64)]))
        if part.slots:
            for slot in slots.tolist():
                part.tags[slot] = None
            part.free.extend(slots.tolist())
        else:
            del self._partitions[partition_id]
        return len(keys)

    def listing(self, partition_id: str | None, what: str) -> dict[str, dict]:
        """``{partition: {key: tag}}`` (``what="tags"``) or ``{key: [field, ...]}`` (``"fields"``) per partition."""
        parts = [(p, part) for p, part in self._partitions.items() if partition_id in (None, p)]
        value = (lambda part, s: part.tags[s] or {}) if what == "tags" else _Partition.key_fields
        return {p: {k: value(part, s) for k, s in part.slots.items()} for p, part in parts}

    def stats(self) -> dict:
        """Keys and bytes per partition, objects referenced (and their bytes), per-client I/O."""
        return {
            "partitions": {p: {"keys": len(v.slots), "bytes": v.nbytes} for p, v in self._partitions.items()},
            "objects": len(self._objects),
            "object_bytes": sum(o[1] for o in self._objects.values()),
            "io": {name: dict(counter) for name, counter in self._io.items()},
        }

    def _existing(self, partition_id: str, keys: list[str], op: str) -> tuple[_Partition, np.ndarray]:
        """The partition and the slots of ``keys``, which must all be in it."""
        part = self._partitions.get(partition_id)
        held = part.slots if part is not None else {}
        try:
            return part, np.fromiter(map(held.__getitem__, keys), dtype=np.int64, count=len(keys))
        except KeyError:
            missing = [k for k in keys if k not in held]
            raise KVKeyError(
                f"{op}: {len(missing)} key(s) not found in partition {partition_id!r}: {preview(missing)}."
            ) from None

    def _release(self, objs: np.ndarray) -> None:
        """Forget cells that pointed at objects; an object no cell uses is dropped (Ray frees it)."""
        ids, counts = np.unique(objs, return_counts=True)
        for obj, count in zip(ids.tolist(), counts.tolist()):
            entry = self._objects[obj]
            entry[2] -= count
            if entry[2] <= 0:
                del self._objects[obj]


def _compact(values: np.ndarray, step: int) -> np.ndarray | int:
    """``values`` as its first element when it is ``first + step * arange(len)`` (a put's rows read
    in order, or one object id for all): replies stay small. The reader expands it again."""
    first = int(values[0])
    if values[-1] == first + step * (len(values) - 1) and (np.diff(values) == step).all():
        return first
    return values
