"""Read and write keys of the KV store, talking to the storage units directly (sync and asyncio).

Every operation is written once, as a generator that yields what it waits for, requests to
units (:class:`_Calls`, sent over the channel, ``verl_lite.kv.channel``) or Ray object
references, and receives their values; :class:`KVClient` resolves them blocking and
:class:`AsyncKVClient` with ``await`` (for asyncio code such as rollout workers).

Tensors cross processes as numpy columns (Ray's zero-copy path). A put writes its columns once,
as one object in the object store (arrays of a few MiB in pieces, ``verl_lite.kv.pieces``), and
registers its keys, tags and per-row sizes with every unit holding some of them (one request
per unit, sent together); the object's reference follows to those units through Ray on a
background thread, off the put's path. Small puts travel inside the requests. A get asks each
unit where its keys' rows are, maps each stored object once (zero-copy on the same node;
references come from the client's cache, else from the unit) and returns views when a field's
rows are one run of one put, else gathers them once.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import queue
import socket
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray
from ray.exceptions import ObjectLostError, RayActorError, RayTaskError
from tensordict import TensorDict, TensorDictBase

from verl_lite.kv.batches import Source, assemble_field, build_tensordict, columns_of, view_rows
from verl_lite.kv.channel import UnitChannel
from verl_lite.kv.columns import cell_nbytes, schema_of, take_rows
from verl_lite.kv.config import KVStoreConfig
from verl_lite.kv.errors import KVFieldError, KVSchemaError, KVStoreClosedError, KVStoreError, preview
from verl_lite.kv.keys import unit_of_keys
from verl_lite.kv.meta import KVBatchMeta
from verl_lite.kv.pieces import in_pieces
from verl_lite.kv.wire import compact, decode, encode, pack_keys, unpack_cells

Op = Generator[Any, list, Any]
"""An operation: yields ``_Calls`` or a list of object refs, is sent their values, returns the result."""


@dataclass
class _Calls:
    """Requests for units over the channel: ``(unit, method, args)`` each.

    ``meanwhile`` runs while the units work (a put copies its columns into the object store
    then); its outcome is left in ``outcome`` as ``(ok, value or error)``. With
    ``keep_errors`` the driver returns ``(ok, value)`` per request instead of raising.
    """

    requests: list[tuple[int, str, tuple]]
    meanwhile: Any = None
    keep_errors: bool = False
    outcome: tuple[bool, Any] | None = None


# Puts smaller than this travel inside the requests and stay in the units' heaps; larger ones
# become one object in the object store (a ray.put costs ~2 ms of fixed work here).
_INLINE_BYTES = 64 * 1024
# Stored objects whose references a client keeps, most recently used first (units report drops).
_REFERENCE_CACHE = 8
# Stores shut down from this process; their clients fail fast instead of calling dead actors.
_CLOSED_STORES: set[str] = set()
# Key lists whose checks and unit grouping a client remembers (checking and hashing 8k keys costs ~2 ms).
_ROUTE_CACHE = 4


@dataclass
class _Route:
    """Keys of one call, checked, and grouped by unit: ``(unit, its keys packed, their positions)``,
    plus the stored objects (tokens) that held their rows when this client last put or read them."""

    keys: list[str]
    groups: list[tuple[int, str | bytes, np.ndarray]]
    unique: bool
    objects: tuple[bytes, ...] = ()


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
        unit_info: list[dict],
        name: str | None = None,
    ):
        self.units = list(units)
        self.config = config
        self.store_id = store_id
        self.unit_info = list(unit_info)
        self.name = name or default_client_name()
        self.channel = UnitChannel([info["address"] for info in unit_info], unit_info[0]["secret"])
        self._reset_process_state()

    def _reset_process_state(self) -> None:
        self._node_id: str | None = None
        # The last few key lists this client routed, most recent last: workers read and then write
        # the same keys.
        self._routes: list[_Route] = []
        # References of stored objects this process put or read recently, by token.
        self._references: OrderedDict[bytes, Any] = OrderedDict()
        self._references_lock = threading.Lock()
        # Per unit: its drop counter when this client last heard from it (None: never).
        self._seen: list[int | None] = [None] * len(self.units)
        self._token_prefix = os.urandom(8)
        self._tokens = itertools.count(1)  # next() is atomic: threads may share a client

    def __getstate__(self) -> dict:
        # A client shipped to another process reports under that process's default name and
        # starts with empty caches there.
        state = {k: self.__dict__[k] for k in ("units", "config", "store_id", "unit_info", "channel")}
        state["name"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.name = default_client_name()
        self._reset_process_state()

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
        keys = keys if type(keys) is list else list(keys)
        routes = self._routes
        # Compared by value, not hashed: equal lists of the same strings compare pointer by pointer.
        for i in range(len(routes) - 1, -1, -1):
            route = routes[i]
            if len(route.keys) == len(keys) and route.keys == keys and (route.unique or not unique):
                routes.append(routes.pop(i))  # most recently used last
                return route
        keys = list(keys)  # the route keeps its own copy: the caller may change its list later
        if unique:
            _check_keys(keys, op)
        elif not _all_strings(keys):
            bad = [k for k in keys if not isinstance(k, str)]
            if bad:
                raise KVSchemaError(f"{op}: keys must be strings, got {preview(bad)}.")
        route = _Route(keys, self._groups(keys), unique)
        routes.append(route)
        if len(routes) > _ROUTE_CACHE:
            del routes[0]
        return route

    def _groups(self, keys: list[str]) -> list[tuple[int, str | bytes, np.ndarray]]:
        """``(unit, its keys packed (``wire.pack_keys``), their positions in keys)`` for every unit that
        holds some of ``keys``."""
        if not keys:
            return []
        if len(self.units) == 1:
            return [(0, pack_keys(keys), np.arange(len(keys)))]
        unit_ids = unit_of_keys(keys, len(self.units))
        groups = []
        for u in range(len(self.units)):
            positions = np.flatnonzero(unit_ids == u)
            if len(positions) == len(keys):
                groups.append((u, pack_keys(keys), positions))
            elif len(positions):
                groups.append((u, pack_keys(list(map(keys.__getitem__, positions.tolist()))), positions))
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
        specs = {name: (tuple(schema_of(col)), cell_nbytes(col)) for name, col in columns.items()}
        # Above the inline size the columns become one object, shared by every unit that holds
        # some of the keys; the units register it under a token while ray.put copies it.
        token = self._new_token() if columns and _nbytes(columns) >= _INLINE_BYTES else None
        requests = []
        for u, unit_keys, positions in groups:
            whole = len(groups) == 1
            unit_specs = specs if whole else {n: (s, _rows_of(b, positions)) for n, (s, b) in specs.items()}
            if token is not None:
                chunk = ("ref", None if whole else compact(positions), self.node_id, token)
            elif columns:
                chunk = (
                    "inline",
                    columns if whole else {n: take_rows(c, positions) for n, c in columns.items()},
                )
            else:
                chunk = None
            unit_tags = None if tags is None else [tags[i] for i in positions.tolist()]
            requests.append((u, "put", (partition_id, unit_keys, unit_tags, unit_specs, chunk, self.name)))
        calls = _Calls(
            requests,
            meanwhile=(lambda: ray.put(in_pieces(columns))) if token is not None else None,
            keep_errors=True,
        )
        results = yield calls
        registered = [u for (u, _, _), (ok, _) in zip(groups, results) if ok]
        if token is not None:
            stored, ref = calls.outcome
            if not stored:  # the copy failed: the units must not wait for an object that never comes
                if registered:
                    yield _Calls(
                        [(u, "abandon", (token, f"{type(ref).__name__}: {ref}")) for u in registered]
                    )
                raise ref
            self._remember(token, ref)
            for u in registered:
                _HANDOVER.send(self.units[u], (self.store_id, u), token, ref)
        for ok, value in results:
            if not ok:
                raise value
        route.objects = (token,) if token is not None else ()
        return _meta_from_replies(keys, partition_id, groups, [value for _, value in results])

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
        # While the units answer, map the objects that held these keys' rows last time (this
        # client's own put, or its previous read of the same keys): usually the reply names them.
        expected = self._cached(route.objects)
        calls = _Calls(
            [
                (u, "get", (partition_id, unit_keys, fields, self.name, self.node_id))
                for u, unit_keys, _ in groups
            ],
            meanwhile=(lambda: ray.get(list(expected.values()))) if expected else None,
        )
        replies = yield calls
        names = _field_names(fields, keys, groups, replies)
        # Units holding keys of the same put name the same object: fetch each one once.
        wanted = {token: i for i, reply in enumerate(replies) for token in reply["objects"].values()}
        route.objects = tuple(wanted)
        fetched: dict[bytes, Any] = {}
        if calls.outcome is not None and calls.outcome[0]:
            fetched = {t: v for t, v in zip(expected, calls.outcome[1]) if t in wanted}
        references = self._cached(t for t in wanted if t not in fetched)
        missing: dict[int, list[bytes]] = {}
        for token, i in wanted.items():
            if token not in references and token not in fetched:
                missing.setdefault(groups[i][0], []).append(token)
        if missing:
            handed = yield [self.units[u].refs.remote(tokens) for u, tokens in missing.items()]
            for tokens, refs in zip(missing.values(), handed):
                for token, ref in zip(tokens, refs):
                    references[token] = ref
                    self._remember(token, ref)
        if references:
            tokens = list(references)
            fetched.update(zip(tokens, (yield [references[token] for token in tokens])))
        n = len(keys)
        outputs: dict[str, object] = {}
        runs: dict[tuple[int, int], int | None] = {}
        chunks: dict[tuple[int, int], Any] | None = None
        for name in names:
            # The common case: the field's rows, in key order, are one run of one stored object.
            run = None if copy else _one_run(name, groups, replies, runs)
            view = None if run is None else view_rows(name, fetched[run[0]][name], run[1], run[1] + n, padded)
            if view is not None:
                outputs.update(view)
                continue
            if chunks is None:
                chunks = {}
                for i, reply in enumerate(replies):
                    reply["cells"] = unpack_cells(reply["cells"])
                    chunks.update(((i, cid), fetched[token]) for cid, token in reply["objects"].items())
                    chunks.update(((i, cid), columns) for cid, columns in reply["values"].items())
            sources = _sources(name, groups, replies, chunks)
            outputs.update(assemble_field(name, n, sources, padded=padded, pad_value=pad_value, copy=copy))
        return build_tensordict(n, outputs)

    def _op_update_tags(self, keys: Sequence[str], partition_id: str, tags: Sequence[dict]) -> Op:
        self._check_open("kv_update_tags")
        route = self._route(keys, "kv_update_tags", unique=True)
        keys, groups = route.keys, route.groups
        if len(tags) != len(keys):
            raise KVSchemaError(f"kv_update_tags: got {len(keys)} keys but {len(tags)} tags.")
        replies = yield _Calls(
            [
                (u, "update_tags", (partition_id, unit_keys, [tags[i] for i in pos.tolist()]))
                for u, unit_keys, pos in groups
            ]
        )
        return _meta_from_replies(keys, partition_id, groups, replies)

    def _op_clear(self, keys: Sequence[str] | None, partition_id: str) -> Op:
        self._check_open("kv_clear")
        if keys is None:
            counts = yield _Calls([(u, "clear", (partition_id, None)) for u in range(len(self.units))])
        else:
            groups = self._route(keys, "kv_clear", unique=False).groups
            counts = yield _Calls([(u, "clear", (partition_id, unit_keys)) for u, unit_keys, _ in groups])
        return int(sum(counts))

    def _op_list(self, partition_id: str | None, method: str) -> Op:
        self._check_open("kv_list")
        parts = yield _Calls([(u, method, (partition_id,)) for u in range(len(self.units))])
        merged: dict[str, dict] = {} if partition_id is None else {partition_id: {}}
        for part in parts:
            for pid, entries in part.items():
                merged.setdefault(pid, {}).update(entries)
        return merged

    def _op_ping(self) -> Op:
        self._check_open("ping")
        yield _Calls([(u, "ping", ()) for u in range(len(self.units))])

    def _op_stats(self) -> Op:
        self._check_open("stats")
        units = yield _Calls([(u, "stats", ()) for u in range(len(self.units))])
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

    # ------------------------------------------------------------------------ units and caches
    def _run(self, op: Op) -> Any:
        """Drive ``op`` blocking: channel requests, then ``ray.get`` for object references."""
        try:
            pending = next(op)
            while True:
                pending = op.send(self._call_units(pending) if isinstance(pending, _Calls) else _get(pending))
        except StopIteration as done:
            return done.value

    async def _arun(self, op: Op) -> Any:
        """Drive ``op`` without blocking the event loop (channel requests on a worker thread)."""
        loop = asyncio.get_running_loop()
        try:
            pending = next(op)
            while True:
                if isinstance(pending, _Calls):
                    values = await loop.run_in_executor(None, self._call_units, pending)
                elif pending:
                    try:
                        values = list(await asyncio.gather(*pending))
                    except (RayTaskError, RayActorError, ObjectLostError) as err:
                        raise _unwrap(err) from None
                else:
                    values = []
                pending = op.send(values)
        except StopIteration as done:
            return done.value

    def _call_units(self, calls: _Calls) -> list:
        """Send ``calls`` over the channel and return their values (raising the first unit error
        unless ``calls.keep_errors``)."""
        payloads = [(u, encode((method, args, self._seen[u]))) for u, method, args in calls.requests]
        meanwhile = None
        if calls.meanwhile is not None:

            def meanwhile() -> None:
                try:
                    calls.outcome = (True, calls.meanwhile())
                except Exception as err:  # noqa: BLE001 - the operation decides what to do
                    calls.outcome = (False, err)

        blobs = self.channel.call(payloads, meanwhile)
        results = []
        for (u, _), blob in zip(payloads, blobs):
            ok, value, seq, dropped = decode(blob)
            self._forget(u, seq, dropped)
            results.append((ok, value))
        if calls.keep_errors:
            return results
        for ok, value in results:
            if not ok:
                raise value
        return [value for _, value in results]

    def _new_token(self) -> bytes:
        """A process-unique id for a stored object (the units know it before Ray names it)."""
        return self._token_prefix + next(self._tokens).to_bytes(8, "little")

    def _remember(self, token: bytes, ref: Any) -> None:
        with self._references_lock:
            self._references[token] = ref
            self._references.move_to_end(token)
            while len(self._references) > _REFERENCE_CACHE:
                self._references.popitem(last=False)

    def _cached(self, tokens: Iterable[bytes]) -> dict[bytes, Any]:
        """References this client holds for ``tokens`` (those it has), marked recently used."""
        with self._references_lock:
            found = {token: self._references[token] for token in tokens if token in self._references}
            for token in found:
                self._references.move_to_end(token)
        return found

    def _forget(self, unit: int, seq: int, dropped: list[bytes] | None) -> None:
        """Let go of references to objects ``unit`` dropped (every one when it cannot tell)."""
        with self._references_lock:
            if dropped is None:
                self._references.clear()
            else:
                for token in dropped:
                    self._references.pop(token, None)
            seen = self._seen[unit]
            self._seen[unit] = seq if seen is None else max(seen, seq)
        if dropped:
            _HANDOVER.dropped((self.store_id, unit), dropped)


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
        return self._run(self._op_put(keys, partition_id, fields, tags))

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
        return self._run(self._op_get(keys, partition_id, select_fields, padded, pad_value, copy))

    def kv_list(self, partition_id: str | None = None) -> dict[str, dict[str, dict]]:
        """``{partition: {key: tag}}`` for one partition or all; reads tags only, never fields."""
        return self._run(self._op_list(partition_id, "list_tags"))

    def kv_field_names(self, partition_id: str | None = None) -> dict[str, dict[str, list[str]]]:
        """``{partition: {key: [field, ...]}}``: which fields each key holds."""
        return self._run(self._op_list(partition_id, "field_names"))

    def kv_update_tags(self, keys: Sequence[str], partition_id: str, tags: Sequence[dict]) -> KVBatchMeta:
        """Merge ``tags`` into the tags of existing ``keys`` (a missing key raises ``KVKeyError``)."""
        return self._run(self._op_update_tags(keys, partition_id, tags))

    def kv_clear(self, keys: Sequence[str] | None, partition_id: str) -> int:
        """Delete ``keys`` (every key of the partition when ``None``); returns how many existed."""
        return self._run(self._op_clear(keys, partition_id))

    def stats(self) -> dict:
        """Keys and bytes per partition (``partitions``), per-client I/O (``io``) and per unit (``units``)."""
        return self._run(self._op_stats())

    def io_accounting(self) -> dict[str, dict[str, int]]:
        """Tensor bytes written and read (and put/get calls) per client name, summed over units."""
        return self.stats()["io"]

    def ping(self) -> None:
        """One empty round trip to every unit (a health check; ``bench/kv_store.py`` times it)."""
        self._run(self._op_ping())

    def as_async(self) -> AsyncKVClient:
        """An asyncio client of the same store under the same name."""
        return AsyncKVClient(self.units, self.config, self.store_id, self.unit_info, self.name)


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
        return await self._arun(self._op_put(keys, partition_id, fields, tags))

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
        return await self._arun(self._op_get(keys, partition_id, select_fields, padded, pad_value, copy))

    async def kv_list(self, partition_id: str | None = None) -> dict[str, dict[str, dict]]:
        """See :meth:`KVClient.kv_list`."""
        return await self._arun(self._op_list(partition_id, "list_tags"))

    async def kv_field_names(self, partition_id: str | None = None) -> dict[str, dict[str, list[str]]]:
        """See :meth:`KVClient.kv_field_names`."""
        return await self._arun(self._op_list(partition_id, "field_names"))

    async def kv_update_tags(
        self, keys: Sequence[str], partition_id: str, tags: Sequence[dict]
    ) -> KVBatchMeta:
        """See :meth:`KVClient.kv_update_tags`."""
        return await self._arun(self._op_update_tags(keys, partition_id, tags))

    async def kv_clear(self, keys: Sequence[str] | None, partition_id: str) -> int:
        """See :meth:`KVClient.kv_clear`."""
        return await self._arun(self._op_clear(keys, partition_id))

    async def stats(self) -> dict:
        """See :meth:`KVClient.stats`."""
        return await self._arun(self._op_stats())


# ------------------------------------------------------------------------------------ drivers
class _Handover:
    """Hands the references of this process's stored objects to the units, on a daemon thread.

    A put registers its object with the units over the channel and returns; the reference
    (which only Ray can carry, so that the units keep the object alive) follows here, so the put
    does not wait for a Ray call; until then the queue holds it. A Ray call with a reference costs
    ~1 ms of CPU across processes, so hand-overs go out in batches, one call per unit, each
    reference at most ``interval_s`` after its put; references of objects the unit dropped
    meanwhile (short-lived rows, reported back in unit replies) are not sent at all. A reader in
    another process that needs a reference before it arrives waits for it at the unit.
    """

    def __init__(self, interval_s: float = 0.02, remembered_drops: int = 4096) -> None:
        self.interval_s = interval_s
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        # ((store id, unit index), token) of objects units reported dropped, oldest first.
        self._dropped: OrderedDict[tuple[tuple[str, int], bytes], None] = OrderedDict()
        self._remembered_drops = remembered_drops

    def send(self, unit: Any, unit_key: tuple[str, int], token: bytes, ref: Any) -> None:
        """Queue ``ref`` (stored object ``token``) for ``unit`` (``unit_key``: store id, unit index)."""
        if self._thread is None or not self._thread.is_alive():
            with self._lock:
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(target=self._run, name="kv-handover", daemon=True)
                    self._thread.start()
        self._queue.put((time.monotonic(), unit, unit_key, (token, ref)))

    def dropped(self, unit_key: tuple[str, int], tokens: list[bytes]) -> None:
        """The unit ``unit_key`` dropped the objects ``tokens``: their references need not be handed over."""
        with self._lock:
            for token in tokens:
                self._dropped[(unit_key, token)] = None
            while len(self._dropped) > self._remembered_drops:
                self._dropped.popitem(last=False)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            wait = first[0] + self.interval_s - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            self._send_queued(first)
            del first  # hold no reference between batches

    def _send_queued(self, first: tuple) -> None:
        """Send ``first`` and everything queued behind it, one Ray call per unit."""
        by_unit: dict[tuple[str, int], tuple[Any, list]] = {}
        item: tuple | None = first
        while item is not None:
            _, unit, unit_key, handed = item
            by_unit.setdefault(unit_key, (unit, []))[1].append(handed)
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                item = None
        with self._lock:
            for key, (_, items) in by_unit.items():
                items[:] = [handed for handed in items if (key, handed[0]) not in self._dropped]
        for unit, items in by_unit.values():
            if not items:
                continue
            try:
                unit.hold.remote(items)
            except Exception:  # noqa: BLE001 - the store or Ray is gone: nothing to hand over
                pass


_HANDOVER = _Handover()


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


def _all_strings(keys: list) -> bool:
    """True when every key is a ``str`` (a quick test: joining fails on anything else)."""
    try:
        "".join(keys)
    except TypeError:
        return False
    return True


def _check_keys(keys: list[str], op: str) -> None:
    """Raise unless ``keys`` are non-empty, distinct strings."""
    if not (_all_strings(keys) and all(keys)):
        bad = [k for k in keys if not isinstance(k, str) or not k]
        if bad:
            raise KVSchemaError(f"{op}: keys must be non-empty strings, got {preview(bad)}.")
    if len(set(keys)) != len(keys):
        dup = [k for k, count in Counter(keys).items() if count > 1]
        raise KVSchemaError(f"{op}: duplicate keys in one call: {preview(dup)}.")


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


def _one_run(
    name: str, groups: list, replies: list[dict], offsets: dict[tuple[int, int], int | None]
) -> tuple[bytes, int] | None:
    """``(token, first row)`` when field ``name``'s rows, in key order, are consecutive rows of one
    stored object (packed cells, see ``wire.pack_cells``), else None. ``offsets`` memoises the
    check per unit and row array, which the fields of one put share."""
    token, offset = None, None
    for i, ((_, _, positions), reply) in enumerate(zip(groups, replies)):
        ids, rows = reply["cells"][name]
        if not isinstance(ids, int):
            return None
        if isinstance(rows, str):  # the same rows as an earlier field
            rows = reply["cells"][rows][1]
        object_token = reply["objects"].get(ids)
        if object_token is None or (token is not None and object_token != token):
            return None
        key = (i, id(rows))
        if key not in offsets:
            shift = rows - positions  # constant when key k sits at row k + shift
            offsets[key] = int(shift[0]) if len(shift) and (shift == shift[0]).all() else None
        shift = offsets[key]
        if shift is None or (offset is not None and shift != offset):
            return None
        token, offset = object_token, shift
    return (token, offset) if token is not None else None


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
