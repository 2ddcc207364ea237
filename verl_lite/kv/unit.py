"""A storage unit: the Ray actor that holds one shard of the KV store's *metadata*.

A unit keeps, per partition, its keys, their tags and, for every field, where each key's row
lives: ``(chunk, row)``. Field data never passes through it. A put of tensors of any size is one
object in Ray's object store, written once by the writer (``ray.put``) and *shared* by every
unit that holds keys of that put: each unit keeps a reference to the object plus the rows it
owns, so the object is freed by Ray once the last unit has dropped it (``kv_clear``, overwrites).
A get answers with the objects' tokens and row indices; a reader on the object's node maps it
zero-copy, a reader on another node receives just its rows by value. Small puts (under
``client._INLINE_BYTES``) travel inside the request and stay in the unit's heap.

Clients call the unit over its socket channel (``verl_lite.kv.channel``): requests are handled
one at a time on the actor's event loop, so each sees and changes the state atomically. Object
references cannot travel over a socket, so they take Ray: the writer registers a put over the
channel under a token of its own while it copies the data (``ray.put``), then hands the
reference over with :meth:`hold`, off its critical path; a reader that does not hold the reference yet asks :meth:`refs` for it,
which waits for the hand-over when needed. Clients cache references, and every reply tells the
caller which objects the unit dropped since its last call, so caches never pin freed rows.

Ray objects belong to the process that put them (Ray 2.56 removed ``ray.put(_owner=...)``, the
only way to hand one to the unit without copying it): a writer's rows outlive it only until Ray
evicts them, and reading them after that raises ``KVStoreError``. Rollout and trainer workers
live for the whole run, so in practice the rows live as long as they are needed.

Bookkeeping is vectorised: each key has a slot, and each field is a few numpy arrays indexed by
slot (chunk id, row, bytes), so puts, gets and clears cost numpy operations per call plus one
dict lookup per key, not Python work per cell. A key list seen recently (as packed on the wire)
maps straight to its slots until one of its keys is removed, and an emptied partition keeps its
arrays for its next put. The unit also counts, per client name, how many tensor bytes were
written and read (from the metadata).
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import Coroutine
from itertools import repeat
from typing import Any

import numpy as np
import ray

from verl_lite.kv.channel import serve
from verl_lite.kv.columns import RowSchema, take_rows
from verl_lite.kv.errors import KVFieldError, KVKeyError, KVSchemaError, KVStoreError, preview
from verl_lite.kv.wire import decode, encode, pack_cells, unpack_keys

_ABSENT = -1
_MIN_SLOTS = 64
# Key lists per partition whose slots a unit remembers (see _Partition.recent).
_RECENT_KEY_LISTS = 8
# Tokens of dropped objects a unit remembers for clients' reference caches (older drops: "drop all").
_DROP_LOG = 4096
_GONE = "kv_batch_get: the rows were cleared or overwritten while being read; read them again."
# How long a reader waits for a writer to hand a stored object's reference to the unit.
_HANDOVER_TIMEOUT_S = 120.0


class _Chunk:
    """One put's columns: an object in the object store (named by its writer's ``token``; its
    reference ``ref`` once the writer handed it over, ``ready`` set then, or ``failure`` if the
    copy failed) or, for small puts, the columns themselves (``data``), plus the node they live
    on and how many cells use them."""

    __slots__ = ("token", "ref", "failure", "ready", "data", "node_id", "nbytes", "live")

    def __init__(self, token: bytes | None, data: dict | None, node_id: str | None, nbytes: int, live: int):
        self.token, self.data, self.node_id, self.nbytes, self.live = token, data, node_id, nbytes, live
        self.ref: Any = None
        self.failure: str | None = None
        self.ready = asyncio.Event() if token is not None else None


class _Field:
    """Where each slot's row of one field lives: chunk id (``-1`` = absent), row and bytes.

    The three are rows of one ``(3, capacity)`` array, so creating and growing a field is one
    allocation; ``chunk``, ``row`` and ``nbytes`` are views of it.
    """

    __slots__ = ("schema", "cells", "chunk", "row", "nbytes", "count")

    def __init__(self, schema: RowSchema, capacity: int):
        self.schema = schema
        cells = np.empty((3, capacity), dtype=np.int64)
        cells[0] = _ABSENT
        self._bind(cells)
        self.count = 0  # cells present

    def _bind(self, cells: np.ndarray) -> None:
        self.cells = cells
        self.chunk, self.row, self.nbytes = cells

    def grow(self, capacity: int) -> None:
        cells = np.empty((3, capacity), dtype=np.int64)
        held = self.cells.shape[1]
        cells[:, :held] = self.cells
        cells[0, held:] = _ABSENT
        self._bind(cells)


class _Partition:
    """Keys of one partition on this unit: key -> slot, tags by slot, fields by name."""

    __slots__ = ("slots", "tags", "free", "capacity", "fields", "nbytes", "removals", "recent")

    def __init__(self) -> None:
        self.slots: dict[str, int] = {}  # insertion order = key order of listings
        self.tags: list[dict | None] = []  # None: no tags yet (or a free slot)
        self.free: list[int] = []
        self.capacity = 0
        self.fields: dict[str, _Field] = {}  # insertion order = field order of replies
        self.nbytes = 0
        self.removals = 0  # calls that removed keys (their slots may be reused since)
        # Slots of key lists seen recently, as packed on the wire: workers read and write the
        # same key lists several times a step; valid while no key was removed.
        self.recent: OrderedDict[str, tuple[int, slice | np.ndarray]] = OrderedDict()

    def empty(self) -> None:
        """Forget every key, keeping the fields' arrays (all cells are absent once no key is left)."""
        self.slots, self.tags, self.free = {}, [], []
        self.nbytes = 0
        self.removals += 1
        self.recent.clear()

    def remember(self, packed: str | bytes, slots: slice | np.ndarray) -> None:
        """Keep the slots of the key list ``packed`` (``wire.pack_keys``) for :meth:`recall`."""
        if isinstance(packed, str):
            self.recent[packed] = (self.removals, slots)
            self.recent.move_to_end(packed)
            if len(self.recent) > _RECENT_KEY_LISTS:
                self.recent.popitem(last=False)

    def recall(self, packed: str | bytes) -> slice | np.ndarray | None:
        """Slots of the key list ``packed`` if it was seen recently and none of its keys was removed since."""
        hit = self.recent.get(packed) if isinstance(packed, str) else None
        if hit is None or hit[0] != self.removals:
            return None
        self.recent.move_to_end(packed)
        return hit[1]

    def allocate(self, count: int) -> range | list[int]:
        """``count`` free slots (a ``range`` when they are all new), growing every field when needed."""
        reused: list[int] = []
        if self.free:
            reused = self.free[len(self.free) - count :] if count <= len(self.free) else self.free
            self.free = self.free[: len(self.free) - len(reused)]
        start = len(self.tags)
        fresh = range(start, start + count - len(reused))
        if fresh:
            self.tags.extend([None] * len(fresh))
            if len(self.tags) > self.capacity:
                self.capacity = max(2 * self.capacity, len(self.tags), _MIN_SLOTS)
                for f in self.fields.values():
                    f.grow(self.capacity)
        return reused + list(fresh) if reused else fresh

    def slots_of(self, keys: list[str]) -> np.ndarray:
        """Slots of ``keys`` (all present)."""
        return np.fromiter(map(self.slots.__getitem__, keys), dtype=np.int64, count=len(keys))

    def present(self, slots: np.ndarray) -> dict[str, np.ndarray]:
        """Per field: which of ``slots`` hold it."""
        return {name: f.chunk[slots] != _ABSENT for name, f in self.fields.items()}

    def merge_tags(self, slots: list[int], tags: list[dict]) -> None:
        """Merge ``tags`` into the tags of ``slots`` (a key without tags holds ``None``)."""
        held = self.tags
        for s, tag in zip(slots, tags):
            if held[s] is None:
                held[s] = dict(tag)
            else:
                held[s].update(tag)

    def key_fields(self, slot: int) -> list[str]:
        return [name for name, f in self.fields.items() if f.chunk[slot] != _ABSENT]


class StorageUnit:
    """Holds the keys that hash to unit ``index`` of a store; clients call it through
    ``verl_lite.kv.channel`` (see :meth:`_handle`), Ray methods do the rest."""

    def __init__(self, index: int, num_units: int, store_id: str, config: dict, secret: bytes):
        self.index, self.num_units, self.store_id, self.config = index, num_units, store_id, config
        self._secret = secret
        self.node_id = ray.get_runtime_context().get_node_id()
        self._partitions: dict[str, _Partition] = {}
        self._idle: dict[str, _Partition] = {}  # emptied partitions, reused by their next put
        self._chunks: dict[int, _Chunk] = {}
        self._chunk_of_token: dict[bytes, int] = {}
        self._next_chunk = 0
        self._io: dict[str, Counter] = defaultdict(Counter)
        self._drop_seq = 0
        self._drops: deque[tuple[int, bytes]] = deque(maxlen=_DROP_LOG)
        self._serving: asyncio.Task | None = None  # starts the channel's server, once
        self._methods = {
            "put": self._put,
            "get": self._get,
            "update_tags": self._update_tags,
            "clear": self._clear,
            "list_tags": self.list_tags,
            "field_names": self.field_names,
            "stats": self.stats,
            "abandon": self._abandon,
            "ping": lambda: None,
        }

    # ------------------------------------------------------------------------------ Ray methods
    async def describe(self) -> dict:
        """Store identity and the channel's address and secret, so ``get_kv_client`` in any
        process of the job can rebuild a client (Ray carries the secret; the channel never does)."""
        if self._serving is None:  # concurrent first calls share one start
            self._serving = asyncio.ensure_future(
                serve(ray.util.get_node_ip_address(), self._secret, self._handle)
            )
        server = await self._serving
        host, port = server.sockets[0].getsockname()[:2]
        return {
            "index": self.index,
            "num_units": self.num_units,
            "store_id": self.store_id,
            "config": self.config,
            "node_id": self.node_id,
            "address": (host, port),
            "secret": self._secret,
        }

    async def hold(self, items: list[tuple[bytes, Any]]) -> None:
        """Take ``(token, reference)`` of stored objects registered over the channel (a writer
        hands them over after its put). A reference whose rows were dropped meanwhile is let go."""
        for token, ref in items:
            cid = self._chunk_of_token.get(token)
            if cid is not None:
                chunk = self._chunks[cid]
                chunk.ref = ref
                chunk.ready.set()

    async def refs(self, tokens: list[bytes]) -> list:
        """References of stored objects by token, waiting for their writers' hand-over if needed."""
        chunks = []
        for token in tokens:
            cid = self._chunk_of_token.get(token)
            if cid is None:
                raise KVStoreError(_GONE)
            chunks.append(self._chunks[cid])
        return [await self._reference(chunk) for chunk in chunks]

    def _abandon(self, token: bytes, reason: str) -> None:
        """The writer could not store the object registered as ``token``: reads of its rows fail."""
        cid = self._chunk_of_token.get(token)
        if cid is not None:
            chunk = self._chunks[cid]
            chunk.failure = reason
            chunk.ready.set()

    # --------------------------------------------------------------------------------- channel
    def _handle(self, payload: bytes) -> bytes | Coroutine[Any, Any, bytes]:
        """Answer one channel request ``(method, args, since)`` with ``(ok, value, seq, dropped)``:
        the caller learns which objects (tokens) the unit dropped after ``since`` (:meth:`_dropped`).
        Returns a coroutine instead when the method has to wait (a get of rows whose object has not
        been handed over yet)."""
        method, since = "request", None
        try:
            method, args, since = decode(payload)
            value = self._methods[method](*args)
        except Exception as err:  # noqa: BLE001 - every failure goes back to the caller
            return self._reply(method, False, err, since)
        if asyncio.iscoroutine(value):
            return self._reply_when_done(method, value, since)
        return self._reply(method, True, value, since)

    async def _reply_when_done(self, method: str, waiting: Coroutine, since: int | None) -> bytes:
        try:
            value = await waiting
        except Exception as err:  # noqa: BLE001 - every failure goes back to the caller
            return self._reply(method, False, err, since)
        return self._reply(method, True, value, since)

    def _reply(self, method: str, ok: bool, value: Any, since: int | None) -> bytes:
        seq, dropped = self._dropped(since)
        try:
            return encode((ok, value, seq, dropped))
        except Exception as err:  # noqa: BLE001 - a value or an error that does not pickle
            what = f"unpicklable reply ({err})" if ok else f"{type(value).__name__}: {value}"
            return encode(
                (False, KVStoreError(f"storage unit {self.index}: {method} failed: {what}"), seq, dropped)
            )

    def _dropped(self, since: int | None) -> tuple[int, list[bytes] | None]:
        """``(current drop counter, tokens of objects dropped after since)``; ``None`` when the log no
        longer reaches back that far (the caller forgets every reference it got from this unit)."""
        if since is None or since >= self._drop_seq:
            return self._drop_seq, []
        if not self._drops or self._drops[0][0] > since + 1:
            return self._drop_seq, None
        dropped = []
        for seq, token in reversed(self._drops):
            if seq <= since:
                break
            dropped.append(token)
        return self._drop_seq, dropped

    # ----------------------------------------------------------------------------------- writes
    def _put(
        self,
        partition_id: str,
        keys: bytes,
        tags: list[dict] | None,
        specs: dict[str, tuple[tuple, Any]],
        chunk: tuple | None,
        client: str,
    ) -> dict:
        """Create or extend ``keys``: merge tags, (over)write the fields in ``specs``.

        Args:
            keys: the keys, packed on their own (``wire.pack_keys``; a client reuses them for the same key list).
            specs: field -> ``(row schema as a tuple, bytes per row)`` (an int for equal rows, else an array
                aligned with ``keys``): all the unit needs to know about the rows.
            chunk: where the rows are: ``("ref", rows, node_id, token)`` for the object the
                writer names ``token``, written on node ``node_id`` (``rows``: the row of each
                key in it, ``None`` for ``0..len(keys)-1``; its reference follows through
                :meth:`hold`), or
                ``("inline", columns)`` (the keys' rows, kept here); ``None`` for a tags-only put.
        """
        packed, keys = keys, unpack_keys(keys)
        n = len(keys)
        self._io[client]["puts"] += 1
        part = self._partitions.get(partition_id)
        new_schemas = self._check_schema(part, partition_id, keys, specs)
        if part is None:
            part = self._partitions[partition_id] = self._idle.pop(partition_id, None) or _Partition()
        chunk_id, rows = self._add_chunk(n, specs, chunk, client)
        # The common case: new keys, which hold no cells yet (every key is new in an empty partition).
        held = list(map(part.slots.get, keys)) if part.slots else None
        absent = n if held is None else held.count(None)
        created = absent == n
        if created:
            slots = part.allocate(n)
            part.slots.update(zip(keys, slots))
        else:
            if absent:
                at = [i for i, slot in enumerate(held) if slot is None]
                fresh = part.allocate(absent)
                part.slots.update(zip([keys[i] for i in at], fresh))
                for i, slot in zip(at, fresh):
                    held[i] = slot
            slots = held
        index = _index(slots)
        part.remember(packed, index)
        if tags is not None:
            part.merge_tags(slots, tags)
        for name, schema in new_schemas.items():
            f = part.fields.get(name)
            if f is None:
                part.fields[name] = _Field(schema, part.capacity)
            else:  # a field whose cells were all cleared takes the new rows' schema
                f.schema = schema
        released: list[np.ndarray] = []
        for name, (_, row_bytes) in specs.items():
            f = part.fields[name]
            if not created:
                old = f.chunk[index]
                if old.max() != _ABSENT:  # some keys held this field: their cells are replaced
                    replaced = old != _ABSENT
                    released.append(old[replaced])
                    part.nbytes -= int(f.nbytes[index][replaced].sum())
                    f.count -= int(replaced.sum())
            f.count += n
            f.chunk[index] = chunk_id
            f.row[index] = rows
            f.nbytes[index] = row_bytes
            part.nbytes += _total_bytes(row_bytes, n)
        self._drop_cells(released)
        if created:
            fields = list(specs)
        else:
            fields = [name for name, f in part.fields.items() if f.chunk[index].min() != _ABSENT]
        return {"tags": [part.tags[s] for s in slots] if tags is not None else None, "fields": fields}

    def _update_tags(self, partition_id: str, keys: bytes, tags: list[dict]) -> dict:
        """Merge tags into the tags of existing keys (packed); no field changes."""
        keys = unpack_keys(keys)
        part, slots = self._existing(partition_id, keys, "kv_update_tags")
        part.merge_tags(slots.tolist(), tags)
        present = part.present(slots)
        return {
            "tags": [part.tags[s] for s in slots.tolist()],
            "fields": [n for n, m in present.items() if m.all()],
        }

    def _clear(self, partition_id: str, keys: bytes | None) -> int:
        """Delete keys (packed; every key of the partition when ``None``); missing keys are ignored."""
        keys = unpack_keys(keys) if keys is not None else None
        part = self._partitions.get(partition_id)
        if part is None:
            return 0
        if keys is None:
            removed = list(part.slots.values())
        else:
            removed = list(map(part.slots.pop, keys, repeat(None)))
            if None in removed:
                removed = [slot for slot in removed if slot is not None]
        if not removed:
            return 0
        part.removals += 1
        part.recent.clear()
        index = np.asarray(removed, dtype=np.int64)
        released = []
        for name in list(part.fields):
            f = part.fields[name]
            cells = f.chunk[index]
            if cells.min() != _ABSENT:  # every key held the field
                held = cells
                part.nbytes -= int(f.nbytes[index].sum())
            elif cells.max() == _ABSENT:  # none did
                continue
            else:
                present = cells != _ABSENT
                held = cells[present]
                part.nbytes -= int(f.nbytes[index][present].sum())
            released.append(held)
            f.count -= len(held)
            f.chunk[index] = _ABSENT
        self._drop_cells(released)
        if keys is None or not part.slots:
            # Empty now: out of the listings, but kept (with its arrays) for the partition's next
            # put, as a step's keys are typically all cleared before the next step writes.
            del self._partitions[partition_id]
            part.empty()
            self._idle[partition_id] = part
        else:
            for slot in removed:
                part.tags[slot] = None
            part.free.extend(removed)
        return len(removed)

    # ------------------------------------------------------------------------------------ reads
    def _get(
        self, partition_id: str, keys: bytes, fields: list[str] | None, client: str, node_id: str | None
    ) -> dict | Coroutine[Any, Any, dict]:
        """Where the rows of ``fields`` for ``keys`` (packed) are: per field ``(chunk ids, rows)``
        (packed, see ``wire.pack_cells``), ``objects`` (chunk id -> object token, for a reader on the
        object's node) and ``values`` (chunk id -> the requested rows, for small puts and readers
        on other nodes; their cells are renumbered into those rows). A coroutine when rows must be
        read by value from an object whose reference has not arrived yet."""
        packed, keys = keys, None
        part = self._partitions.get(partition_id)
        slots = part.recall(packed) if part is not None else None
        if slots is None:
            keys = unpack_keys(packed)
            part, slots = self._existing(partition_id, keys, "kv_batch_get")
            part.remember(packed, slots)
        cells: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        uniform: dict[str, int | None] = {}  # field -> its one chunk id, None if several
        needed: set[int] = set()
        nbytes = 0
        for name in part.fields if fields is None else fields:
            f = part.fields.get(name)
            if f is None:
                keys = keys or unpack_keys(packed)
                self._raise_missing(part, partition_id, keys, _as_array(slots), name, None, False)
            chunk_ids = f.chunk[slots]
            lo, hi = int(chunk_ids.min()), int(chunk_ids.max())
            if lo == _ABSENT:
                if fields is None and hi == _ABSENT:
                    continue  # a field none of these keys holds
                keys = keys or unpack_keys(packed)
                self._raise_missing(
                    part, partition_id, keys, _as_array(slots), name, chunk_ids, fields is None
                )
            if lo == hi:
                needed.add(lo)
                uniform[name] = lo
            else:
                needed.update(np.unique(chunk_ids).tolist())
                uniform[name] = None
            cells[name] = (chunk_ids, f.row[slots])
            nbytes += int(f.nbytes[slots].sum())
        self._io[client]["bytes_read"] += nbytes
        self._io[client]["gets"] += 1
        objects: dict[int, bytes] = {}
        by_value = []
        for cid in needed:
            chunk = self._chunks[cid]
            if chunk.token is not None and (node_id is None or node_id == chunk.node_id):
                objects[cid] = chunk.token
            else:
                by_value.append(cid)
        reply = {"fields": list(cells), "cells": cells, "objects": objects, "values": {}}
        if by_value:
            # Cells may be views of the field arrays: snapshot them before waiting.
            reply["cells"] = {name: (c.copy(), r.copy()) for name, (c, r) in cells.items()}
            return self._with_values(reply, by_value, uniform)
        reply["cells"] = pack_cells(cells, uniform)
        return reply

    async def _with_values(self, reply: dict, by_value: list[int], uniform: dict[str, int | None]) -> dict:
        """``reply`` with the rows of chunks ``by_value`` added by value (see :meth:`_get`)."""
        reply["values"] = await self._rows_by_value(reply["cells"], by_value)
        reply["cells"] = pack_cells(reply["cells"], uniform)
        return reply

    def list_tags(self, partition_id: str | None) -> dict[str, dict[str, dict]]:
        """``{partition: {key: tag}}`` for one partition (``{}`` if absent) or all of them."""
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
        """Keys and bytes per partition, chunks held, resident memory and per-client I/O."""
        return {
            "unit": self.index,
            "pid": os.getpid(),
            "partitions": {p: {"keys": len(v.slots), "bytes": v.nbytes} for p, v in self._partitions.items()},
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

    def _existing(self, partition_id: str, keys: list[str], op: str) -> tuple[_Partition, np.ndarray]:
        """The partition and the slots of ``keys``, which must all be in it."""
        part = self._partitions.get(partition_id)
        present = part.slots if part is not None else {}
        try:
            return part, part.slots_of(keys)
        except (KeyError, AttributeError):
            missing = [k for k in keys if k not in present]
            raise KVKeyError(
                f"{op}: {len(missing)} key(s) not found in partition {partition_id!r}: {preview(missing)} "
                f"(storage unit {self.index} holds {len(present)} key(s) of that partition)."
            ) from None

    def _raise_missing(
        self,
        part: _Partition,
        partition_id: str,
        keys: list[str],
        slots: np.ndarray,
        name: str,
        chunk_ids: np.ndarray | None,
        mixed: bool,
    ) -> None:
        """Raise the error for a get whose keys lack field ``name`` (some of them, when ``mixed``;
        ``chunk_ids`` None: a field the partition does not hold at all)."""
        absent = chunk_ids == _ABSENT if chunk_ids is not None else np.ones(len(slots), dtype=bool)
        if mixed:
            i = int(np.argmax(absent != absent[0]))
            raise KVFieldError(
                f"kv_batch_get: keys hold different fields ({keys[0]!r}: "
                f"{sorted(part.key_fields(int(slots[0])))}, {keys[i]!r}: {sorted(part.key_fields(int(slots[i])))}) "
                f"in partition {partition_id!r}; pass select_fields."
            )
        i = int(np.argmax(absent))
        raise KVFieldError(
            f"kv_batch_get: field {name!r} is missing for key {keys[i]!r} in partition "
            f"{partition_id!r}; the key holds {sorted(part.key_fields(int(slots[i])))}."
        )

    def _check_schema(
        self, part: _Partition | None, partition_id: str, keys: list[str], specs: dict
    ) -> dict[str, RowSchema]:
        """Schemas of fields new to the partition; raises if a put's field clashes with what it holds."""
        new = {}
        for name, (schema, _) in specs.items():
            f = part.fields.get(name) if part is not None else None
            if f is None or f.count == 0:
                new[name] = RowSchema(*schema)  # schemas travel as plain tuples
            elif f.schema != schema:
                raise KVSchemaError(
                    f"kv_batch_put: field {name!r} in partition {partition_id!r} holds {f.schema.describe()}, "
                    f"but the put for key {keys[0]!r} brings {RowSchema(*schema).describe()}; every row of a field "
                    "needs the same dtype and trailing shape."
                )
        return new

    def _add_chunk(self, n: int, specs: dict, chunk: tuple | None, client: str) -> tuple[int, Any]:
        """Register a put's chunk of ``n`` rows; returns its id and the row of each key in it."""
        if chunk is None or not specs:
            return _ABSENT, 0
        nbytes = sum(_total_bytes(row_bytes, n) for _, row_bytes in specs.values())
        chunk_id = self._next_chunk
        self._next_chunk += 1
        rows = np.arange(n, dtype=np.int64)
        if chunk[0] == "ref":
            _, positions, node_id, token = chunk
            self._chunks[chunk_id] = _Chunk(token, None, node_id, nbytes, n * len(specs))
            self._chunk_of_token[token] = chunk_id
            if positions is not None:
                rows = positions
        else:
            self._chunks[chunk_id] = _Chunk(None, chunk[1], None, nbytes, n * len(specs))
        self._io[client]["bytes_written"] += nbytes
        return chunk_id, rows

    def _drop_cells(self, released: list[np.ndarray]) -> None:
        """Forget cells that pointed at chunks; a chunk no cell uses is dropped (Ray frees it)."""
        if not released:
            return
        counts: Counter[int] = Counter()
        for chunk_ids in released:
            lo = int(chunk_ids.min())
            if lo == int(chunk_ids.max()):  # the common case: cells of one put
                counts[lo] += len(chunk_ids)
            else:
                ids, per_id = np.unique(chunk_ids, return_counts=True)
                counts.update(dict(zip(ids.tolist(), per_id.tolist())))
        for chunk_id, count in counts.items():
            chunk = self._chunks[chunk_id]
            chunk.live -= count
            if chunk.live <= 0:
                del self._chunks[chunk_id]
                if chunk.token is not None:
                    del self._chunk_of_token[chunk.token]
                    self._drop_seq += 1
                    self._drops.append((self._drop_seq, chunk.token))
                    chunk.ready.set()  # readers waiting for its reference learn it is gone

    async def _reference(self, chunk: _Chunk) -> Any:
        """The reference of a stored object, waiting for its writer to hand it over if needed."""
        if not chunk.ready.is_set():
            try:
                await asyncio.wait_for(chunk.ready.wait(), _HANDOVER_TIMEOUT_S)
            except asyncio.TimeoutError:
                raise KVStoreError(
                    f"kv_batch_get: storage unit {self.index} never received the stored rows' object "
                    f"from its writer within {_HANDOVER_TIMEOUT_S:.0f}s; the writing process probably "
                    "died right after its put. Rewrite the rows."
                ) from None
        if chunk.failure is not None:
            raise KVStoreError(
                f"kv_batch_get: the put that wrote these rows failed ({chunk.failure}); rewrite them."
            )
        if chunk.ref is None:
            raise KVStoreError(_GONE)
        return chunk.ref

    async def _rows_by_value(self, cells: dict[str, tuple], wanted: list[int]) -> dict[int, dict]:
        """The requested rows of chunks ``wanted``, by value, renumbering their cells in ``cells``."""
        held = {cid: self._chunks[cid] for cid in wanted}
        refs = [cid for cid, chunk in held.items() if chunk.data is None]
        references = [await self._reference(held[cid]) for cid in refs]
        stored = dict(zip(refs, await asyncio.gather(*references))) if refs else {}
        chunks: dict[int, dict] = {cid: {} for cid in wanted}
        for name, (chunk_ids, rows) in cells.items():
            new_rows = rows.copy()
            for cid in wanted:
                at = chunk_ids == cid
                if not at.any():
                    continue
                source = stored[cid] if cid in stored else held[cid].data
                picked, new_rows[at] = np.unique(rows[at], return_inverse=True)
                chunks[cid][name] = take_rows(source[name], picked)
            cells[name] = (chunk_ids, new_rows)
        return chunks


def _index(slots: range | list[int]) -> slice | np.ndarray:
    """Numpy index of ``slots``: a slice for a run of fresh slots (cheaper than fancy indexing)."""
    if isinstance(slots, range):
        return slice(slots.start, slots.stop)
    return np.asarray(slots, dtype=np.int64)


def _as_array(slots: slice | np.ndarray) -> np.ndarray:
    """Slots as an array (``_Partition.recall`` may give a slice)."""
    return np.arange(slots.start, slots.stop) if isinstance(slots, slice) else slots


def _total_bytes(row_bytes: int | np.ndarray, n: int) -> int:
    """Bytes of ``n`` rows given bytes per row (an int stands for every row)."""
    return row_bytes * n if isinstance(row_bytes, int) else int(row_bytes.sum())


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
