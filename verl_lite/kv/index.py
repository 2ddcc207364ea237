"""An index actor: the Ray actor that holds one shard of the KV store's keys, tags and row locations.

Column data never passes through it. A writer ``ray.put``s its columns and sends the object
reference along with the put; every index actor holding keys of that put keeps the reference
(Ray counts it as a borrower) plus, per field and key, ``(object id, row)``. When the last cell
that uses an object is cleared or overwritten the actor drops the reference, and Ray frees the
object once its writer has dropped it too (the client does, right after the put).

Ray objects belong to the process that put them: rows outlive their writer only until Ray
notices it died. Rollout and trainer workers live for the whole run, so in practice rows live
as long as they are needed; reading rows of a dead writer raises ``KVStoreError``.

Bookkeeping is vectorised: each key has a slot, and each field is a few numpy arrays indexed by
slot, so puts, gets and clears cost numpy operations per call plus one dict lookup per key.
The actor is a plain (single-threaded) Ray actor, so every call sees and changes its state
atomically. It imports numpy and Ray only.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, NamedTuple

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

    __slots__ = ("schema", "obj", "row", "nbytes")

    def __init__(self, schema: RowSchema, capacity: int):
        self.schema = schema
        self.obj = np.full(capacity, _ABSENT, dtype=np.int64)
        self.row = np.zeros(capacity, dtype=np.int64)
        self.nbytes = np.zeros(capacity, dtype=np.int64)

    def grow(self, capacity: int) -> None:
        pad = capacity - len(self.obj)
        self.obj = np.concatenate([self.obj, np.full(pad, _ABSENT, dtype=np.int64)])
        self.row = np.concatenate([self.row, np.zeros(pad, dtype=np.int64)])
        self.nbytes = np.concatenate([self.nbytes, np.zeros(pad, dtype=np.int64)])


class _Partition:
    """Keys of one partition on this actor: key -> slot, tags by slot, fields by name."""

    def __init__(self) -> None:
        self.slots: dict[str, int] = {}  # insertion order = key order of listings
        self.tags: list[dict | None] = []
        self.free: list[int] = []
        self.fields: dict[str, _Field] = {}
        self.nbytes = 0

    def slots_for(self, keys: list[str]) -> np.ndarray:
        """Slots of ``keys``, creating the keys that are new."""
        held = list(map(self.slots.get, keys)) if self.slots else [None] * len(keys)
        if not self.free and held.count(None) == len(keys):  # the common case: all new keys
            fresh = range(len(self.tags), len(self.tags) + len(keys))
            self.tags.extend([None] * len(keys))
            self.slots.update(zip(keys, fresh))
            held = fresh
        elif new := [i for i, slot in enumerate(held) if slot is None]:
            reused = self.free[-len(new) :] if self.free else []
            del self.free[len(self.free) - len(reused) :]
            fresh = range(len(self.tags), len(self.tags) + len(new) - len(reused))
            self.tags.extend([None] * len(fresh))  # None: no tags yet
            for i, slot in zip(new, [*reused, *fresh]):
                held[i] = slot
            self.slots.update((keys[i], held[i]) for i in new)
        for f in self.fields.values():
            if len(f.obj) < len(self.tags):
                f.grow(max(2 * len(f.obj), len(self.tags), _MIN_SLOTS))
        return (
            np.arange(held.start, held.stop) if isinstance(held, range) else np.asarray(held, dtype=np.int64)
        )

    def merge_tags(self, slots: np.ndarray, tags: list[dict]) -> list[dict]:
        """Merge ``tags`` into the tags of ``slots``; returns their tags after the merge."""
        held = self.tags
        for slot, tag in zip(slots.tolist(), tags):
            if held[slot] is None:
                held[slot] = dict(tag)
            else:
                held[slot].update(tag)
        return [held[s] for s in slots.tolist()]

    def capacity(self) -> int:
        return max(len(self.tags), _MIN_SLOTS)

    def key_fields(self, slot: int) -> list[str]:
        return [name for name, f in self.fields.items() if f.obj[slot] != _ABSENT]

    def common_fields(self, slots: np.ndarray) -> list[str]:
        return [name for name, f in self.fields.items() if (f.obj[slots] != _ABSENT).all()]


class IndexActor:
    """Holds the keys that hash to index ``index`` of a store (see the module docstring)."""

    def __init__(self, index: int, num_indexes: int, store_id: str, config: dict):
        self.info = {"index": index, "num_indexes": num_indexes, "store_id": store_id, "config": config}
        self._partitions: dict[str, _Partition] = {}
        self._objects: dict[int, list] = {}  # object id -> [ObjectRef, bytes, live cells]
        self._next_object = 0
        self._io: dict[str, Counter] = defaultdict(Counter)

    def describe(self) -> dict:
        """Store identity and config, so ``get_kv_client`` in any process can build a client."""
        return self.info

    def put(
        self,
        partition_id: str,
        keys: list[str],
        tags: list[dict] | None,
        specs: dict[str, tuple[tuple, Any]],
        boxed_ref: list | None,
        rows: np.ndarray | None,
        client: str,
    ) -> dict:
        """Create or extend ``keys``: merge ``tags``, (over)write the fields in ``specs``.

        Args:
            specs: field -> ``(row schema tuple, bytes per row)`` (an int for equal rows, else an
                array aligned with ``keys``).
            boxed_ref: ``[ObjectRef]`` of the writer's columns (boxed so Ray passes the reference,
                not the value), or None for a tags-only put.
            rows: the row of each key in that object (None: ``0..len(keys)-1``).
        """
        keys = split_keys(keys)
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
            obj = self._next_object
            self._next_object += 1
            total = sum(
                int(np.sum(b)) if isinstance(b, np.ndarray) else b * len(keys) for _, b in specs.values()
            )
            self._objects[obj] = [boxed_ref[0], total, len(keys) * len(specs)]
            self._io[client]["bytes_written"] += total
            rows = np.arange(len(keys)) if rows is None else rows
            released = []
            for name, (schema, row_bytes) in specs.items():
                f = part.fields.get(name)
                if f is None or f.schema != schema:  # new, or every row of it was cleared
                    f = part.fields[name] = _Field(RowSchema(*schema), part.capacity())
                old = f.obj[slots]
                released.append(old[old != _ABSENT])
                part.nbytes += (
                    int(np.sum(row_bytes)) if isinstance(row_bytes, np.ndarray) else row_bytes * len(keys)
                )
                part.nbytes -= int(f.nbytes[slots][old != _ABSENT].sum())
                f.obj[slots], f.row[slots], f.nbytes[slots] = obj, rows, row_bytes
            self._release(np.concatenate(released))
        return {
            "tags": merged,
            "fields": part.common_fields(slots),
        }

    def get(self, partition_id: str, keys: list[str] | str, fields: list[str] | None, client: str) -> dict:
        """Where the rows of ``fields`` (every field the keys hold when None) are: per field
        ``(object ids, rows)`` (each compacted, see :func:`_compact`), and ``refs``: object id ->
        ObjectRef, which the reader ``ray.get``s."""
        keys = split_keys(keys)
        part, slots = self._existing(partition_id, keys, "kv_batch_get")
        names = part.common_fields(slots) if fields is None else fields
        if fields is None:
            for f in part.fields.values():
                held = f.obj[slots] != _ABSENT
                if held.any() and not held.all():
                    i, j = int(np.argmax(held)), int(np.argmin(held))
                    raise KVFieldError(
                        f"kv_batch_get: keys hold different fields ({keys[i]!r}: {part.key_fields(slots[i])}, "
                        f"{keys[j]!r}: {part.key_fields(slots[j])}) in partition {partition_id!r}; "
                        "pass select_fields."
                    )
        cells, objects, nbytes = {}, set(), 0
        for name in names:
            f = part.fields.get(name)
            obj = f.obj[slots] if f is not None else np.full(len(slots), _ABSENT)
            if (obj == _ABSENT).any():
                i = int(np.argmax(obj == _ABSENT))
                raise KVFieldError(
                    f"kv_batch_get: field {name!r} is missing for key {keys[i]!r} in partition "
                    f"{partition_id!r}; the key holds {part.key_fields(slots[i])}."
                )
            cells[name] = (_compact(obj, 0), _compact(f.row[slots], 1))
            objects.update(np.unique(obj).tolist())
            nbytes += int(f.nbytes[slots].sum())
        self._io[client]["gets"] += 1
        self._io[client]["bytes_read"] += nbytes
        return {"fields": names, "cells": cells, "refs": {o: self._objects[o][0] for o in objects}}

    def update_tags(self, partition_id: str, keys: list[str], tags: list[dict]) -> dict:
        """Merge ``tags`` into the tags of existing ``keys``; no field changes."""
        keys = split_keys(keys)
        part, slots = self._existing(partition_id, keys, "kv_update_tags")
        return {"tags": part.merge_tags(slots, tags), "fields": part.common_fields(slots)}

    def clear(self, partition_id: str, keys: list[str] | None) -> int:
        """Delete ``keys`` (every key of the partition when None); missing keys are ignored."""
        part = self._partitions.get(partition_id)
        if part is None:
            return 0
        keys = list(part.slots) if keys is None else [k for k in split_keys(keys) if k in part.slots]
        if not keys:
            return 0
        slots = np.fromiter(map(part.slots.pop, keys), dtype=np.int64, count=len(keys))
        released = []
        for f in part.fields.values():
            held = f.obj[slots] != _ABSENT
            released.append(f.obj[slots][held])
            part.nbytes -= int(f.nbytes[slots][held].sum())
            f.obj[slots] = _ABSENT
        self._release(np.concatenate(released) if released else np.zeros(0, dtype=np.int64))
        if part.slots:
            for slot in slots.tolist():
                part.tags[slot] = None
            part.free.extend(slots.tolist())
        else:
            del self._partitions[partition_id]
        return len(keys)

    def list_tags(self, partition_id: str | None) -> dict[str, dict[str, dict]]:
        """``{partition: {key: tag}}`` for one partition (``{}`` if absent) or every partition."""
        return {
            p: {k: part.tags[s] or {} for k, s in part.slots.items()}
            for p, part in self._selected(partition_id)
        }

    def field_names(self, partition_id: str | None) -> dict[str, dict[str, list[str]]]:
        """``{partition: {key: [field, ...]}}``, like :meth:`list_tags`."""
        return {
            p: {k: part.key_fields(s) for k, s in part.slots.items()}
            for p, part in self._selected(partition_id)
        }

    def stats(self) -> dict:
        """Keys and bytes per partition, objects referenced (and their bytes), per-client I/O."""
        return {
            "partitions": {p: {"keys": len(v.slots), "bytes": v.nbytes} for p, v in self._partitions.items()},
            "objects": len(self._objects),
            "object_bytes": sum(o[1] for o in self._objects.values()),
            "io": {name: dict(counter) for name, counter in self._io.items()},
        }

    def _selected(self, partition_id: str | None) -> list[tuple[str, _Partition]]:
        if partition_id is None:
            return list(self._partitions.items())
        part = self._partitions.get(partition_id)
        return [(partition_id, part)] if part is not None else []

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
        if not len(objs):
            return
        ids, counts = np.unique(objs, return_counts=True)
        for obj, count in zip(ids.tolist(), counts.tolist()):
            entry = self._objects[obj]
            entry[2] -= count
            if entry[2] <= 0:
                del self._objects[obj]


def join_keys(keys: list[str]) -> list[str] | str:
    """Keys as one ``"\\0"``-joined string when none contains ``"\\0"``: Ray ships one string much
    faster than thousands of small ones. :func:`split_keys` undoes it."""
    joined = "\0".join(keys)
    return joined if keys and joined.count("\0") == len(keys) - 1 else keys


def split_keys(keys: list[str] | str) -> list[str]:
    """Inverse of :func:`join_keys`."""
    return keys.split("\0") if isinstance(keys, str) else keys


def _compact(values: np.ndarray, step: int) -> np.ndarray | int:
    """``values`` as its first element when it is ``first + step * arange(len)`` (a put's rows read
    in order, or one object id for all): replies stay small. The reader expands it again."""
    first = int(values[0])
    if values[-1] == first + step * (len(values) - 1) and (np.diff(values) == step).all():
        return first
    return values
