"""A storage unit: the Ray actor that holds one shard of the KV store (keys, tags, field chunks).

Field data lives in Ray's object store, owned by the unit: each put becomes one object per unit
(a dict of numpy columns, written once with ``ray.put``) and each row-field *cell* points at a row
of such a chunk. A get answers with the cells and the chunk references, so a reader on the same
node maps the chunks zero-copy; readers on other nodes receive just their rows by value. A chunk
is released (and its memory freed by Ray, or its spill file deleted) once no cell points at it.
The unit also keeps, per client name, how many tensor bytes were written and read.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np
import ray

from verl_lite.kv.columns import ROWS, RowSchema, row_nbytes, schema_of, take_rows
from verl_lite.kv.errors import KVFieldError, KVKeyError, KVSchemaError, preview


class _Chunk:
    """One put's tensor columns on this unit, in the object store, and how many cells use it."""

    __slots__ = ("ref", "row_bytes", "nbytes", "live")

    def __init__(self, ref: Any, row_bytes: dict[str, np.ndarray], live: int):
        self.ref, self.row_bytes, self.live = ref, row_bytes, live
        self.nbytes = int(sum(b.sum() for b in row_bytes.values()))


class _Value:
    """A per-row python value (a ``NonTensorStack`` row), kept inline."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


class _Entry:
    """One key: its tag, its cells (field -> ``(chunk_id, row)`` or ``_Value``) and their bytes."""

    __slots__ = ("tag", "cells", "nbytes")

    def __init__(self, tag: dict, cells: dict, nbytes: int):
        self.tag, self.cells, self.nbytes = tag, cells, nbytes


@dataclass
class _Partition:
    """Keys of one partition on this unit, plus the row schema and cell count of each field."""

    entries: dict[str, _Entry] = field(default_factory=dict)
    schema: dict[str, RowSchema] = field(default_factory=dict)
    field_rows: Counter = field(default_factory=Counter)
    nbytes: int = 0


class StorageUnit:
    """Holds the keys that hash to unit ``index`` of a store; methods are called by ``KVClient``.

    Bookkeeping is per key (a dict lookup), never per byte: tensor bytes stay in the chunks.
    """

    def __init__(self, index: int, num_units: int, store_id: str, config: dict):
        self.index, self.num_units, self.store_id, self.config = index, num_units, store_id, config
        self.node_id = ray.get_runtime_context().get_node_id()
        self._partitions: dict[str, _Partition] = {}
        self._chunks: dict[int, _Chunk] = {}
        self._next_chunk = 0
        self._io: dict[str, Counter] = defaultdict(Counter)

    def describe(self) -> dict:
        """Store identity, so ``get_kv_client`` in any process can rebuild a client."""
        return {
            "index": self.index,
            "num_units": self.num_units,
            "store_id": self.store_id,
            "config": self.config,
            "node_id": self.node_id,
        }

    # ----------------------------------------------------------------------------------- writes
    def put(
        self, partition_id: str, keys: list[str], tags: list[dict] | None, columns: dict | list, client: str
    ) -> dict:
        """Create or extend ``keys``: merge tags, (over)write the given field columns.

        ``columns`` maps field -> column; or is ``[ref]`` to such a dict in the object store; or
        ``[ref, positions]`` to a whole batch shared by all units on this node, of which this
        unit stores rows ``positions`` (the writer then copies the batch once, not once per unit).
        """
        if isinstance(columns, list):
            shipped = ray.get(columns[0])
            columns = (
                shipped if len(columns) == 1 else {n: take_rows(c, columns[1]) for n, c in shipped.items()}
            )
        part = self._partitions.get(partition_id) or _Partition()
        part.schema.update(self._check_schema(part, partition_id, keys, columns))
        self._partitions[partition_id] = part
        tensors = {name: col for name, col in columns.items() if col[0] != ROWS}
        chunk_id, key_bytes = self._store_chunk(part, tensors, len(keys), client)
        part.field_rows.update(dict.fromkeys(columns, len(keys)))  # before releasing overwritten cells
        entries = part.entries
        existing = [i for i, key in enumerate(keys) if key in entries]
        if len(existing) < len(keys):  # new keys: one dict per key, no per-field Python work
            entries.update(
                (
                    key,
                    _Entry(
                        dict(tags[i]) if tags else {}, dict.fromkeys(tensors, (chunk_id, i)), key_bytes[i]
                    ),
                )
                for i, key in enumerate(keys)
                if key not in entries
            )
        for i in existing:
            entry = entries[keys[i]]
            if tags:
                entry.tag.update(tags[i])
            entry.nbytes += key_bytes[i]
            for name in tensors:
                self._set_cell(part, entry, name, (chunk_id, i))
        for name, col in columns.items():
            if col[0] == ROWS:
                for key, value in zip(keys, col[1]):
                    self._set_cell(part, entries[key], name, _Value(value))
        return self._describe_keys(part, keys, tags is not None, list(columns) if not existing else None)

    def update_tags(self, partition_id: str, keys: list[str], tags: list[dict]) -> dict:
        """Merge ``tags`` into the tags of existing ``keys`` (no field changes)."""
        part = self._existing(partition_id, keys, "kv_update_tags")
        for key, tag in zip(keys, tags):
            part.entries[key].tag.update(tag)
        return self._describe_keys(part, keys, with_tags=True)

    def clear(self, partition_id: str, keys: list[str] | None) -> int:
        """Delete ``keys`` (all keys of the partition when ``None``); missing keys are ignored."""
        part = self._partitions.get(partition_id)
        if part is None:
            return 0
        if keys is None:
            removed = list(part.entries.values())
            part.entries = {}
        else:
            removed = [e for e in map(part.entries.pop, keys, [None] * len(keys)) if e is not None]
        part.nbytes -= sum(e.nbytes for e in removed)
        fields = Counter()
        for signature, count in Counter(tuple(e.cells) for e in removed).items():
            fields.update(dict.fromkeys(signature, count))
        cells = chain.from_iterable(e.cells.values() for e in removed)
        chunk_cells = Counter(c[0] for c in cells if c.__class__ is tuple)
        part.field_rows.subtract(fields)
        for name in fields:
            if part.field_rows[name] <= 0:
                del part.field_rows[name], part.schema[name]
        for chunk_id, count in chunk_cells.items():
            self._drop_cells(chunk_id, count)
        if not part.entries:
            del self._partitions[partition_id]
        return len(removed)

    # ------------------------------------------------------------------------------------ reads
    def get(
        self, partition_id: str, keys: list[str], fields: list[str] | None, client: str, node_id: str | None
    ) -> dict:
        """Cells of ``fields`` for ``keys`` and the chunks they point at (references, or rows by value)."""
        part = self._existing(partition_id, keys, "kv_batch_get")
        entries = [part.entries[k] for k in keys]
        if fields is None:
            fields = self._common_fields(partition_id, keys, entries)
        replies: dict[str, tuple] = {}
        needed: set[int] = set()
        nbytes = 0
        for name in fields:
            cells = [e.cells.get(name) for e in entries]
            if any(c is None for c in cells):
                i = next(i for i, c in enumerate(cells) if c is None)
                raise KVFieldError(
                    f"kv_batch_get: field {name!r} is missing for key {keys[i]!r} in partition "
                    f"{partition_id!r}; the key holds {sorted(entries[i].cells)}."
                )
            if cells[0].__class__ is _Value:
                replies[name] = (ROWS, [c.value for c in cells])
                continue
            located = np.array(cells, dtype=np.int64).reshape(len(cells), 2)
            chunk_ids, rows = located[:, 0], located[:, 1]
            for cid in np.unique(chunk_ids).tolist():
                nbytes += int(self._chunks[cid].row_bytes[name][rows[chunk_ids == cid]].sum())
                needed.add(cid)
            replies[name] = ("cells", chunk_ids, rows)
        self._io[client]["bytes_read"] += nbytes
        self._io[client]["gets"] += 1
        if node_id is None or node_id == self.node_id:
            chunks = {cid: self._chunks[cid].ref for cid in needed}
        else:
            chunks = self._rows_by_value(replies, needed)
        return {"fields": list(fields), "cells": replies, "chunks": chunks}

    def list_tags(self, partition_id: str | None) -> dict[str, dict[str, dict]]:
        """``{partition: {key: tag}}`` for one partition (``{}`` if absent) or all of them."""
        return {p: {k: e.tag for k, e in part.entries.items()} for p, part in self._selected(partition_id)}

    def field_names(self, partition_id: str | None) -> dict[str, dict[str, list[str]]]:
        """``{partition: {key: [field, ...]}}``, like :meth:`list_tags`."""
        return {
            p: {k: list(e.cells) for k, e in part.entries.items()} for p, part in self._selected(partition_id)
        }

    def stats(self) -> dict:
        """Keys and bytes per partition, chunks held, resident memory and per-client I/O."""
        return {
            "unit": self.index,
            "pid": os.getpid(),
            "partitions": {
                p: {"keys": len(v.entries), "bytes": v.nbytes} for p, v in self._partitions.items()
            },
            "num_chunks": len(self._chunks),
            "chunk_bytes": sum(c.nbytes for c in self._chunks.values()),
            **_memory(),
            "io": {name: dict(counter) for name, counter in self._io.items()},
        }

    # ---------------------------------------------------------------------------------- helpers
    def _selected(self, partition_id: str | None) -> list[tuple[str, _Partition]]:
        if partition_id is None:
            return list(self._partitions.items())
        part = self._partitions.get(partition_id)
        return [(partition_id, part)] if part is not None else []

    def _describe_keys(
        self, part: _Partition, keys: list[str], with_tags: bool, fields: list[str] | None = None
    ) -> dict:
        """The fields all ``keys`` hold and, if ``with_tags``, their tags (what a ``KVBatchMeta`` carries).

        Tags go back only to calls that set tags: a field-only put (a worker adding
        ``old_log_probs``) gets a reply of a few bytes. ``fields`` short-cuts the intersection
        when the caller knows it (a put of new keys only).
        """
        entries = [part.entries[k] for k in keys]
        if fields is None:
            common = set(entries[0].cells).intersection(*(e.cells.keys() for e in entries[1:]))
            fields = [f for f in entries[0].cells if f in common]
        return {"tags": [e.tag for e in entries] if with_tags else None, "fields": fields}

    def _existing(self, partition_id: str, keys: list[str], op: str) -> _Partition:
        part = self._partitions.get(partition_id)
        present = part.entries if part is not None else {}
        missing = [k for k in keys if k not in present]
        if missing:
            raise KVKeyError(
                f"{op}: {len(missing)} key(s) not found in partition {partition_id!r}: {preview(missing)} "
                f"(storage unit {self.index} holds {len(present)} key(s) of that partition)."
            )
        return part

    def _common_fields(self, partition_id: str, keys: list[str], entries: list[_Entry]) -> list[str]:
        """Fields of the requested keys, which must all hold the same ones."""
        fields = list(entries[0].cells)
        for key, entry in zip(keys, entries):
            if entry.cells.keys() != set(fields):
                raise KVFieldError(
                    f"kv_batch_get: keys hold different fields ({keys[0]!r}: {sorted(fields)}, "
                    f"{key!r}: {sorted(entry.cells)}) in partition {partition_id!r}; pass select_fields."
                )
        return fields

    def _check_schema(
        self, part: _Partition, partition_id: str, keys: list[str], columns: dict
    ) -> dict[str, RowSchema]:
        """Row schemas of the put's columns; raises if one clashes with what the partition holds."""
        schemas = {}
        for name, col in columns.items():
            rows = len(col[1]) if col[0] != "jagged" else len(col[2]) - 1
            if rows != len(keys):
                raise KVSchemaError(f"kv_batch_put: field {name!r} has {rows} rows for {len(keys)} keys.")
            new = schemas[name] = schema_of(col)
            old = part.schema.get(name, new)
            if old != new:
                raise KVSchemaError(
                    f"kv_batch_put: field {name!r} in partition {partition_id!r} holds {old.describe()}, "
                    f"but the put for key {keys[0]!r} brings {new.describe()}; every row of a field "
                    "needs the same dtype and trailing shape."
                )
        return schemas

    def _store_chunk(
        self, part: _Partition, tensors: dict[str, tuple], rows: int, client: str
    ) -> tuple[int, list[int]]:
        """Copy a put's tensor columns into a unit-owned object; returns its id and bytes per row."""
        self._io[client]["puts"] += 1
        if not tensors:
            return -1, [0] * rows
        chunk_id = self._next_chunk
        self._next_chunk += 1
        # The copy into a unit-owned object is what lets the store outlive the writer process.
        chunk = _Chunk(ray.put(tensors), {n: row_nbytes(c) for n, c in tensors.items()}, rows * len(tensors))
        self._chunks[chunk_id] = chunk
        part.nbytes += chunk.nbytes
        self._io[client]["bytes_written"] += chunk.nbytes
        return chunk_id, sum(chunk.row_bytes.values()).tolist()

    def _set_cell(self, part: _Partition, entry: _Entry, name: str, cell: tuple | _Value) -> None:
        """Point ``entry``'s field ``name`` at ``cell``, forgetting the cell it replaces."""
        old = entry.cells.get(name)
        entry.cells[name] = cell
        if old is not None:
            self._release(part, entry, name, old)

    def _release(self, part: _Partition, entry: _Entry, name: str, cell: tuple | _Value) -> None:
        """Forget an overwritten cell of ``entry``."""
        part.field_rows[name] -= 1
        if cell.__class__ is _Value:
            return
        nbytes = int(self._chunks[cell[0]].row_bytes[name][cell[1]])
        entry.nbytes -= nbytes
        part.nbytes -= nbytes
        self._drop_cells(cell[0], 1)

    def _drop_cells(self, chunk_id: int, count: int) -> None:
        chunk = self._chunks[chunk_id]
        chunk.live -= count
        if chunk.live <= 0:
            # Dropping the last reference frees the object; no view of it is kept anywhere here.
            del self._chunks[chunk_id]

    def _rows_by_value(self, replies: dict[str, tuple], needed: set[int]) -> dict[int, dict]:
        """For readers on another node: copy just the requested rows, renumbering the cells."""
        chunks: dict[int, dict] = {cid: {} for cid in needed}
        stored = dict(zip(needed, ray.get([self._chunks[cid].ref for cid in needed])))
        for name, reply in replies.items():
            if reply[0] != "cells":
                continue
            _, chunk_ids, rows = reply
            new_rows = np.empty_like(rows)
            for cid in np.unique(chunk_ids).tolist():
                at = chunk_ids == cid
                wanted, new_rows[at] = np.unique(rows[at], return_inverse=True)
                chunks[cid][name] = take_rows(stored[cid][name], wanted)
            replies[name] = ("cells", chunk_ids, new_rows)
        return chunks


def _memory() -> dict[str, int]:
    """Resident memory of this process in bytes: total, anonymous (heap) and shared (object store pages).

    Linux ``/proc`` only; zeros elsewhere. Object-store pages this process has touched count as
    shared resident memory while they stay mapped, even after the objects are freed.
    """
    fields = {"VmRSS": "rss_bytes", "RssAnon": "rss_anon_bytes", "RssShmem": "rss_shmem_bytes"}
    memory = dict.fromkeys(fields.values(), 0)
    try:
        with open("/proc/self/status") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name in fields:
                    memory[fields[name]] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return memory
