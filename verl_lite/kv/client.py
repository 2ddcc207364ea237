"""Read and write keys of the KV store, talking to the storage units directly (sync and asyncio).

Every operation is written once, as a generator that yields the Ray object references it waits
for and receives their values; :class:`KVClient` resolves them with ``ray.get`` and
:class:`AsyncKVClient` with ``await`` (for asyncio code such as rollout workers). Tensors cross
processes as numpy columns (Ray's zero-copy path). A put writes its columns once, as one object
in the object store, and sends every unit holding some of its keys that object's reference plus
its keys, tags and per-row sizes (one call per unit); small puts travel inside the calls. A get
asks each unit where its keys' rows are, maps each stored object once (zero-copy on the same
node) and returns views when a field's rows are one run of one put, else gathers them once.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections import Counter, OrderedDict
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray
from ray.exceptions import ObjectLostError, RayActorError, RayTaskError
from tensordict import TensorDict, TensorDictBase

from verl_lite.kv.batches import Source, assemble_field, build_tensordict, columns_of
from verl_lite.kv.columns import cell_nbytes, schema_of, take_rows
from verl_lite.kv.config import KVStoreConfig
from verl_lite.kv.errors import KVFieldError, KVSchemaError, KVStoreClosedError, KVStoreError, preview
from verl_lite.kv.keys import unit_of_keys
from verl_lite.kv.meta import KVBatchMeta
from verl_lite.kv.wire import compact, decode, encode, split, unpack_cells

Op = Generator[list, list, Any]
"""An operation: yields a list of object refs, is sent their values, returns the result."""

# Puts smaller than this travel inside the unit calls and stay in the units' heaps (Ray inlines
# arguments under ~100 KB); larger ones become one object in the object store.
_INLINE_BYTES = 64 * 1024
# Stores shut down from this process; their clients fail fast instead of calling dead actors.
_CLOSED_STORES: set[str] = set()
# Key lists whose checks and unit grouping a client remembers (hashing 8k keys costs ~1 ms).
_ROUTE_CACHE = 4


@dataclass
class _Route:
    """Keys of one call, checked, and grouped by unit: ``(unit, its keys pickled, their positions)``."""

    keys: list[str]
    groups: list[tuple[int, bytes, np.ndarray]]
    unique: bool


def default_client_name() -> str:
    """``{hostname}:{pid}``: the name a client reports in the store's byte accounting by default."""
    return f"{socket.gethostname()}:{os.getpid()}"


class _KVOps:
    """The operations shared by the sync and async clients (as generators, see module docstring)."""

    def __init__(
        self,
        units: list,
        config: KVStoreConfig,
        store_id: str,
        name: str | None = None,
        unit_nodes: list[str] | None = None,
    ):
        self.units = list(units)
        self.config = config
        self.store_id = store_id
        self.unit_nodes = list(unit_nodes) if unit_nodes is not None else [None] * len(self.units)
        self.name = name or config.client_name or default_client_name()
        self._node_id: str | None = None
        # The last few key lists this client routed: workers read and then write the same keys.
        self._routes: OrderedDict[tuple, _Route] = OrderedDict()

    def __getstate__(self) -> dict:
        # A client shipped to another process reports under that process's default name.
        state = dict(self.__dict__)
        state["name"] = None
        state["_node_id"] = None
        state["_routes"] = OrderedDict()
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.name = self.config.client_name or default_client_name()

    @property
    def node_id(self) -> str:
        if self._node_id is None:
            self._node_id = ray.get_runtime_context().get_node_id()
        return self._node_id

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, units={len(self.units)}, prefix={self.config.name_prefix!r})"

    def _check_open(self, op: str) -> None:
        if self.store_id in _CLOSED_STORES:
            raise KVStoreClosedError(
                f"{op}: the KV store was shut down (shutdown_kv_store()); start one with init_kv_store()."
            )

    def _route(self, keys: Sequence[str], op: str, unique: bool) -> _Route:
        """Check ``keys`` (strings; non-empty and distinct when ``unique``) and group them by unit."""
        try:
            cache_key = tuple(keys)
            route = self._routes.get(cache_key)
        except TypeError:  # an unhashable key: the checks below name it
            cache_key, route = None, None
        if route is not None and (route.unique or not unique):
            self._routes.move_to_end(cache_key)
            return route
        keys = list(keys)
        if unique:
            _check_keys(keys, op)
        elif not set(map(type, keys)) <= {str}:  # else: the exact check, str subclasses pass
            bad = [k for k in keys if not isinstance(k, str)]
            if bad:
                raise KVSchemaError(f"{op}: keys must be strings, got {preview(bad)}.")
        route = _Route(keys, self._groups(keys), unique)
        if cache_key is not None:
            self._routes[cache_key] = route
            if len(self._routes) > _ROUTE_CACHE:
                self._routes.popitem(last=False)
        return route

    def _groups(self, keys: list[str]) -> list[tuple[int, bytes, np.ndarray]]:
        """``(unit, its keys pickled, their positions in keys)`` for every unit that holds some of ``keys``."""
        if not keys:
            return []
        if len(self.units) == 1:
            return [(0, encode(keys), np.arange(len(keys)))]
        unit_ids = unit_of_keys(keys, len(self.units))
        groups = []
        for u in range(len(self.units)):
            positions = np.flatnonzero(unit_ids == u)
            if len(positions) == len(keys):
                groups.append((u, encode(keys), positions))
            elif len(positions):
                groups.append((u, encode(list(map(keys.__getitem__, positions.tolist()))), positions))
        return groups

    # ------------------------------------------------------------------------------ operations
    def _op_put(
        self,
        keys: Sequence[str],
        partition_id: str,
        fields: TensorDictBase | None,
        tags: Sequence[dict] | None,
    ) -> Op:
        self._check_open("kv_batch_put")
        route = self._route(keys, "kv_batch_put", unique=True)
        keys, groups = route.keys, route.groups
        if tags is not None and len(tags) != len(keys):
            raise KVSchemaError(f"kv_batch_put: got {len(keys)} keys but {len(tags)} tags.")
        columns: dict[str, tuple] = {}
        if fields is not None:
            rows = int(fields.batch_size[0]) if fields.batch_dims else 0
            if rows != len(keys):
                raise KVSchemaError(f"kv_batch_put: got {len(keys)} keys but the fields have {rows} rows.")
            columns = columns_of(fields)
        specs = {name: (schema_of(col), cell_nbytes(col)) for name, col in columns.items()}
        refs = None
        if columns and _nbytes(columns) >= _INLINE_BYTES:
            # One object for the whole put, shared by every unit that holds some of its keys.
            refs = [ray.put(columns)]
        calls = []
        for u, unit_keys, positions in groups:
            whole = len(groups) == 1
            unit_specs = specs if whole else {n: (s, _rows_of(b, positions)) for n, (s, b) in specs.items()}
            if refs is not None:
                chunk = ("ref", None if whole else compact(positions), self.node_id)
            elif columns:
                chunk = (
                    "inline",
                    columns if whole else {n: take_rows(c, positions) for n, c in columns.items()},
                )
            else:
                chunk = None
            unit_tags = None if tags is None else [tags[i] for i in positions.tolist()]
            request = encode((partition_id, unit_keys, unit_tags, unit_specs, chunk, self.name))
            calls.append(self.units[u].put.remote(refs, *split(request)))
        replies = yield calls
        return _meta_from_replies(keys, partition_id, groups, [decode(r) for r in replies])

    def _op_get(
        self,
        keys: Sequence[str],
        partition_id: str,
        select_fields: Sequence[str] | None,
        padded: bool,
        pad_value: float,
        copy: bool,
    ) -> Op:
        self._check_open("kv_batch_get")
        route = self._route(keys, "kv_batch_get", unique=False)
        keys, groups = route.keys, route.groups
        if not keys:
            return TensorDict({}, batch_size=[0])
        fields = None if select_fields is None else list(select_fields)
        answers = yield [
            self.units[u].get.remote(
                *split(encode((partition_id, unit_keys, fields, self.name, self.node_id)))
            )
            for u, unit_keys, _ in groups
        ]
        replies = [decode(blob) for blob, _, _ in answers]
        names = _field_names(fields, keys, groups, replies)
        # Units holding keys of the same put answer with the same object: fetch each one once.
        refs = list(dict.fromkeys(ref for _, unit_refs, _ in answers for ref in unit_refs))
        fetched = dict(zip(refs, (yield refs)))
        chunks = {}
        for i, (reply, (_, unit_refs, by_value)) in enumerate(zip(replies, answers)):
            reply["cells"] = unpack_cells(reply["cells"])
            chunks.update(((i, cid), fetched[unit_refs[k]]) for cid, k in reply["chunks"].items())
            chunks.update(((i, cid), columns) for cid, columns in by_value.items())
        outputs: dict[str, object] = {}
        for name in names:
            sources = _sources(name, groups, replies, chunks)
            outputs.update(
                assemble_field(name, len(keys), sources, padded=padded, pad_value=pad_value, copy=copy)
            )
        return build_tensordict(len(keys), outputs)

    def _op_update_tags(self, keys: Sequence[str], partition_id: str, tags: Sequence[dict]) -> Op:
        self._check_open("kv_update_tags")
        route = self._route(keys, "kv_update_tags", unique=True)
        keys, groups = route.keys, route.groups
        if len(tags) != len(keys):
            raise KVSchemaError(f"kv_update_tags: got {len(keys)} keys but {len(tags)} tags.")
        replies = yield [
            self.units[u].update_tags.remote(
                *split(encode((partition_id, unit_keys, [tags[i] for i in pos.tolist()])))
            )
            for u, unit_keys, pos in groups
        ]
        return _meta_from_replies(keys, partition_id, groups, [decode(r) for r in replies])

    def _op_clear(self, keys: Sequence[str] | None, partition_id: str) -> Op:
        self._check_open("kv_clear")
        if keys is None:
            counts = yield [unit.clear.remote(partition_id) for unit in self.units]
        else:
            groups = self._route(keys, "kv_clear", unique=False).groups
            counts = yield [
                self.units[u].clear.remote(partition_id, *split(unit_keys)) for u, unit_keys, _ in groups
            ]
        return int(sum(counts))

    def _op_list(self, partition_id: str | None, method: str) -> Op:
        self._check_open("kv_list")
        parts = yield [getattr(unit, method).remote(partition_id) for unit in self.units]
        merged: dict[str, dict] = {} if partition_id is None else {partition_id: {}}
        for part in parts:
            for pid, entries in part.items():
                merged.setdefault(pid, {}).update(entries)
        return merged

    def _op_stats(self) -> Op:
        self._check_open("stats")
        units = yield [unit.stats.remote() for unit in self.units]
        partitions: dict[str, dict[str, int]] = {}
        io: dict[str, dict[str, int]] = {}
        for unit in units:
            for pid, s in unit["partitions"].items():
                total = partitions.setdefault(pid, {"keys": 0, "bytes": 0})
                total["keys"] += s["keys"]
                total["bytes"] += s["bytes"]
            for client, counters in unit["io"].items():
                total = io.setdefault(client, {"bytes_written": 0, "bytes_read": 0, "puts": 0, "gets": 0})
                for name, value in counters.items():
                    total[name] = total.get(name, 0) + value
        return {"partitions": partitions, "io": io, "units": units}


class KVClient(_KVOps):
    """Blocking client of a KV store; safe to pickle into other Ray workers of the same job."""

    def kv_batch_put(
        self,
        keys: Sequence[str],
        partition_id: str,
        fields: TensorDictBase | None = None,
        tags: Sequence[dict] | None = None,
    ) -> KVBatchMeta:
        """Write ``fields`` (rows aligned with ``keys``) and merge ``tags`` into the keys' tags.

        Keys are created on first write; fields already held by a key are replaced, others kept,
        so workers add ``old_log_probs``, ``values``, ``advantages`` ... to existing keys.

        Returns:
            A ``KVBatchMeta`` with the keys, the fields all of them now hold and, when ``tags``
            were given, the keys' merged tags (empty dicts otherwise; read tags with ``kv_list``).
        """
        return _run(self._op_put(keys, partition_id, fields, tags))

    def kv_batch_get(
        self,
        keys: Sequence[str],
        partition_id: str,
        select_fields: Sequence[str] | None = None,
        padded: bool = False,
        pad_value: float = 0,
        copy: bool = False,
    ) -> TensorDict:
        """Read fields of ``keys`` (all fields the keys hold when ``select_fields`` is None).

        Rows of different lengths come back as jagged nested tensors, or with ``padded=True``
        right-padded with ``pad_value`` plus a bool ``{field}_pad_mask``.

        Zero-copy: when a field's rows are one run of a single put (keys read in the order they
        were written, the common case), the tensor is a view of the stored object in Ray's object
        store, like the arrays ``ray.get`` returns; treat it as read-only, since writing into it
        changes what every reader sees. Other reads gather the rows into fresh tensors. Pass
        ``copy=True`` for private, writable tensors in every case.
        """
        return _run(self._op_get(keys, partition_id, select_fields, padded, pad_value, copy))

    def kv_list(self, partition_id: str | None = None) -> dict[str, dict[str, dict]]:
        """``{partition: {key: tag}}`` for one partition or all; reads tags only, never fields."""
        return _run(self._op_list(partition_id, "list_tags"))

    def kv_field_names(self, partition_id: str | None = None) -> dict[str, dict[str, list[str]]]:
        """``{partition: {key: [field, ...]}}``: which fields each key holds."""
        return _run(self._op_list(partition_id, "field_names"))

    def kv_update_tags(self, keys: Sequence[str], partition_id: str, tags: Sequence[dict]) -> KVBatchMeta:
        """Merge ``tags`` into the tags of existing ``keys`` (a missing key raises ``KVKeyError``)."""
        return _run(self._op_update_tags(keys, partition_id, tags))

    def kv_clear(self, keys: Sequence[str] | None, partition_id: str) -> int:
        """Delete ``keys`` (every key of the partition when ``None``); returns how many existed."""
        return _run(self._op_clear(keys, partition_id))

    def stats(self) -> dict:
        """Keys and bytes per partition (``partitions``), per-client I/O (``io``) and per unit (``units``)."""
        return _run(self._op_stats())

    def io_accounting(self) -> dict[str, dict[str, int]]:
        """Tensor bytes written and read (and put/get calls) per client name, summed over units."""
        return self.stats()["io"]

    def as_async(self) -> AsyncKVClient:
        """An asyncio client of the same store under the same name."""
        return AsyncKVClient(self.units, self.config, self.store_id, self.name, self.unit_nodes)


class AsyncKVClient(_KVOps):
    """The same operations as :class:`KVClient`, as coroutines that await the units."""

    async def kv_batch_put(
        self,
        keys: Sequence[str],
        partition_id: str,
        fields: TensorDictBase | None = None,
        tags: Sequence[dict] | None = None,
    ) -> KVBatchMeta:
        """See :meth:`KVClient.kv_batch_put`."""
        return await _arun(self._op_put(keys, partition_id, fields, tags))

    async def kv_batch_get(
        self,
        keys: Sequence[str],
        partition_id: str,
        select_fields: Sequence[str] | None = None,
        padded: bool = False,
        pad_value: float = 0,
        copy: bool = False,
    ) -> TensorDict:
        """See :meth:`KVClient.kv_batch_get`."""
        return await _arun(self._op_get(keys, partition_id, select_fields, padded, pad_value, copy))

    async def kv_list(self, partition_id: str | None = None) -> dict[str, dict[str, dict]]:
        """See :meth:`KVClient.kv_list`."""
        return await _arun(self._op_list(partition_id, "list_tags"))

    async def kv_field_names(self, partition_id: str | None = None) -> dict[str, dict[str, list[str]]]:
        """See :meth:`KVClient.kv_field_names`."""
        return await _arun(self._op_list(partition_id, "field_names"))

    async def kv_update_tags(
        self, keys: Sequence[str], partition_id: str, tags: Sequence[dict]
    ) -> KVBatchMeta:
        """See :meth:`KVClient.kv_update_tags`."""
        return await _arun(self._op_update_tags(keys, partition_id, tags))

    async def kv_clear(self, keys: Sequence[str] | None, partition_id: str) -> int:
        """See :meth:`KVClient.kv_clear`."""
        return await _arun(self._op_clear(keys, partition_id))

    async def stats(self) -> dict:
        """See :meth:`KVClient.stats`."""
        return await _arun(self._op_stats())


# ------------------------------------------------------------------------------------ drivers
def _run(op: Op) -> Any:
    """Drive ``op`` to completion with blocking ``ray.get``."""
    try:
        refs = next(op)
        while True:
            refs = op.send(_get(refs) if refs else [])
    except StopIteration as done:
        return done.value


async def _arun(op: Op) -> Any:
    """Drive ``op`` to completion, awaiting the object refs (the event loop stays free)."""
    try:
        refs = next(op)
        while True:
            values = []
            if refs:
                try:
                    values = list(await asyncio.gather(*refs))
                except (RayTaskError, RayActorError, ObjectLostError) as err:
                    raise _unwrap(err) from None
            refs = op.send(values)
    except StopIteration as done:
        return done.value


def _get(refs: list) -> list:
    try:
        return ray.get(refs)
    except (RayTaskError, RayActorError, ObjectLostError) as err:
        raise _unwrap(err) from None


def _unwrap(err: Exception) -> Exception:
    """The store's own error behind a Ray error; a dead unit means the store is gone."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, KVStoreError):
        return cause
    if isinstance(err, RayActorError):
        return KVStoreClosedError(
            f"a storage unit of the KV store is gone (the store was shut down or the actor died): {err}"
        )
    if isinstance(err, ObjectLostError):
        return KVStoreError(
            "kv_batch_get: stored rows are lost: the object holding them is gone, usually because the "
            "process that wrote them exited (rows live as long as their writer's process; rewrite them "
            f"from a live process): {err}"
        )
    return err


# ------------------------------------------------------------------------------------ helpers
def _rows_of(row_bytes: int | np.ndarray, positions: np.ndarray) -> int | np.ndarray:
    """Bytes per row of the rows at ``positions`` (an int stands for every row)."""
    return row_bytes[positions] if isinstance(row_bytes, np.ndarray) else row_bytes


def _nbytes(columns: dict[str, tuple]) -> int:
    """Bytes of the numpy arrays in ``columns``."""
    return sum(a.nbytes for col in columns.values() for a in col[1:] if isinstance(a, np.ndarray))


def _check_keys(keys: Sequence[str], op: str) -> list[str]:
    keys = list(keys)
    if not (set(map(type, keys)) <= {str} and all(keys)):  # else: the exact check, str subclasses pass
        bad = [k for k in keys if not isinstance(k, str) or not k]
        if bad:
            raise KVSchemaError(f"{op}: keys must be non-empty strings, got {preview(bad)}.")
    if len(set(keys)) != len(keys):
        dup = [k for k, count in Counter(keys).items() if count > 1]
        raise KVSchemaError(f"{op}: duplicate keys in one call: {preview(dup)}.")
    return keys


def _meta_from_replies(keys: list[str], partition_id: str, groups: list, replies: list[dict]) -> KVBatchMeta:
    tags: list[dict] = []  # KVBatchMeta fills in empty tags
    common: list[str] | None = None
    for (_, _, positions), reply in zip(groups, replies):
        if reply["tags"] is not None:
            tags = tags or [{} for _ in keys]
            for pos, tag in zip(positions.tolist(), reply["tags"]):
                tags[pos] = tag
        common = reply["fields"] if common is None else [f for f in common if f in reply["fields"]]
    return KVBatchMeta(keys=keys, tags=tags, partition_id=partition_id, fields=common or [])


def _field_names(fields: list[str] | None, keys: list[str], groups: list, replies: list[dict]) -> list[str]:
    """Fields to return; without ``select_fields`` every unit's keys must hold the same fields."""
    if fields is not None:
        return fields
    names = replies[0]["fields"]
    for (_, _, positions), reply in zip(groups[1:], replies[1:]):
        if set(reply["fields"]) != set(names):
            raise KVFieldError(
                f"kv_batch_get: the keys hold different fields ({sorted(names)} vs {sorted(reply['fields'])} "
                f"for keys such as {keys[positions[0]]!r}); pass select_fields."
            )
    return names


def _sources(name: str, groups: list, replies: list[dict], chunks: dict) -> list[Source]:
    """Where each output row of field ``name`` comes from, one ``Source`` per stored chunk."""
    sources = []
    for i, ((_, _, positions), reply) in enumerate(zip(groups, replies)):
        chunk_ids, rows = reply["cells"][name]
        first = chunk_ids[0]
        if (chunk_ids == first).all():  # the common case: the unit's rows come from one put
            sources.append(Source(chunks[(i, int(first))][name], rows, positions))
            continue
        order = np.argsort(chunk_ids, kind="stable")
        ids, starts = np.unique(chunk_ids[order], return_index=True)
        for cid, idx in zip(ids.tolist(), np.split(order, starts[1:])):
            sources.append(Source(chunks[(i, cid)][name], rows[idx], positions[idx]))
    return sources
