"""Read and write keys of the KV store: columns through Ray's object store, control through index actors.

A put ``ray.put``s its columns once (numpy arrays: Ray's zero-copy path) and sends the reference,
keys, tags and row sizes to the index actors holding the keys (spread by a hash). A get asks them
where its rows are and ``ray.get``s each object once. The client is synchronous; asyncio code
calls it through ``asyncio.to_thread``.
"""

from __future__ import annotations

import os
import socket
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import ray
from ray.exceptions import ObjectLostError, OwnerDiedError, RayActorError, RayTaskError
from tensordict import TensorDict, TensorDictBase

from verl_lite.kv.columns import Source, assemble_field, build_tensordict, columns_of, row_nbytes, schema_of
from verl_lite.kv.config import KVStoreConfig
from verl_lite.kv.errors import KVFieldError, KVSchemaError, KVStoreClosedError, KVStoreError, preview
from verl_lite.kv.meta import KVBatchMeta

# Stores shut down from this process; their clients fail fast instead of calling dead actors.
CLOSED_STORES: set[str] = set()


class KVClient:
    """Blocking client of a KV store; safe to pickle into other Ray workers of the same job
    (there it reports under that process's default name in the store's byte accounting)."""

    def __init__(self, indexes: list, config: KVStoreConfig, store_id: str, name: str | None = None):
        self.indexes, self.config, self.store_id = list(indexes), config, store_id
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        # tensor bytes this client object has read (the index actors also count them per client name)
        self.bytes_read = 0

    def __reduce__(self):
        return (KVClient, (self.indexes, self.config, self.store_id))

    def kv_batch_put(
        self,
        keys: Sequence[str],
        partition_id: str,
        fields: TensorDictBase | None = None,
        tags: Sequence[dict] | None = None,
    ) -> KVBatchMeta:
        """Write ``fields`` (rows aligned with ``keys``) and merge ``tags`` into the keys' tags.

        Keys are created on first write; fields a key holds are replaced, others kept. Returns a
        ``KVBatchMeta`` of the keys, the fields all of them hold and (when given) their merged tags.
        """
        keys, tags = _checked(keys, "kv_batch_put"), None if tags is None else list(tags)
        if tags is not None and len(tags) != len(keys):
            raise KVSchemaError(f"kv_batch_put: got {len(keys)} keys but {len(tags)} tags.")
        rows = (int(fields.batch_size[0]) if fields.batch_dims else 0) if fields is not None else len(keys)
        if rows != len(keys):
            raise KVSchemaError(f"kv_batch_put: got {len(keys)} keys but the fields have {rows} rows.")
        columns = columns_of(fields) if fields is not None else {}
        specs = {name: (tuple(schema_of(col)), row_nbytes(col)) for name, col in columns.items()}
        self._check_open("kv_batch_put")
        boxed = [ray.put(columns)] if columns and keys else None  # boxed: the actors get the reference

        def args(pos: np.ndarray, whole: bool) -> tuple:
            part = {n: (sch, b if whole or isinstance(b, int) else b[pos]) for n, (sch, b) in specs.items()}
            return _pick(tags, pos) if tags else None, part, boxed, None if whole else pos, self.name

        return self._meta(keys, partition_id, self._scatter("put", keys, partition_id, args))

    def kv_batch_get(
        self, keys: Sequence[str], partition_id: str, select_fields: Sequence[str] | None = None
    ) -> TensorDict:
        """Read fields of ``keys`` (every field the keys hold when ``select_fields`` is None).

        Rows of different lengths come back as jagged nested tensors. Rows that are one run of a
        put come back as read-only views of Ray's object store, as ``ray.get`` returns them.
        """
        keys = list(keys)
        fields = None if select_fields is None else list(select_fields)
        self._check_open("kv_batch_get")
        replies = self._scatter("get", keys, partition_id, lambda pos, whole: (fields, self.name))
        if not replies:
            return TensorDict({}, batch_size=[0])
        names = replies[0][1]["fields"]
        for pos, reply in replies[1:]:
            if set(reply["fields"]) != set(names):
                raise KVFieldError(
                    f"kv_batch_get: the keys hold different fields ({sorted(names)} vs {sorted(reply['fields'])} "
                    f"for keys such as {keys[pos[0]]!r}) in partition {partition_id!r}; pass select_fields."
                )
        # Index actors holding keys of the same put name the same object: fetch each one once.
        refs = list(dict.fromkeys(ref for _, reply in replies for ref in reply["refs"].values()))
        stored = dict(zip(refs, self._get(refs)))
        outputs = {}
        for name in names:
            sources = []
            for pos, reply in replies:
                objs, rows = reply["cells"][name]  # compacted: an int stands for a run (see index.py)
                objs = np.full(len(pos), objs) if isinstance(objs, int) else objs
                rows = np.arange(rows, rows + len(pos)) if isinstance(rows, int) else rows
                for obj in np.unique(objs).tolist():  # usually one: the rows of one put
                    at = objs == obj
                    sources.append(Source(stored[reply["refs"][obj]][name], rows[at], pos[at]))
            outputs[name] = assemble_field(name, len(keys), sources)
        self.bytes_read += sum(reply["nbytes"] for _, reply in replies)
        return build_tensordict(len(keys), outputs)

    def kv_list(self, partition_id: str | None = None) -> dict[str, dict[str, dict]]:
        """``{partition: {key: tag}}`` for one partition or all; reads tags only, never fields."""
        return self._merged("tags", partition_id)

    def kv_field_names(self, partition_id: str | None = None) -> dict[str, dict[str, list[str]]]:
        """``{partition: {key: [field, ...]}}``: which fields each key holds."""
        return self._merged("fields", partition_id)

    def kv_clear(self, keys: Sequence[str] | None, partition_id: str) -> int:
        """Delete ``keys`` (every key of the partition when ``None``); returns how many existed.
        Objects no key uses any more are freed by Ray."""
        self._check_open("kv_clear")
        if keys is None:
            return int(sum(self._get([index.clear.remote(partition_id, None) for index in self.indexes])))
        return int(sum(count for _, count in self._scatter("clear", list(keys), partition_id)))

    def stats(self) -> dict:
        """Keys and bytes per ``partitions``, ``objects`` referenced and their bytes, per-client ``io``."""
        self._check_open("stats")
        total: dict[str, Any] = {"partitions": {}, "objects": 0, "object_bytes": 0, "io": {}}
        for s in self._get([index.stats.remote() for index in self.indexes]):
            for group, value in s.items():
                if isinstance(value, int):
                    total[group] += value
                for name, counters in value.items() if isinstance(value, dict) else ():
                    total[group].setdefault(name, Counter()).update(counters)
        return total

    def _check_open(self, op: str) -> None:
        if self.store_id in CLOSED_STORES:
            raise KVStoreClosedError(
                f"{op}: the KV store was shut down (shutdown_kv_store()); start one with init_kv_store()."
            )

    def _scatter(
        self, method: str, keys: list[str], partition_id: str, args: Callable = lambda pos, whole: ()
    ) -> list[tuple[np.ndarray, Any]]:
        """Call ``method`` on every index actor holding some of ``keys`` (spread by a hash), with
        its keys and ``args(their positions in keys, whether that is all of them)``; returns
        ``(positions, reply)`` per actor called."""
        owner = index_of_keys(keys, len(self.indexes)) if len(self.indexes) > 1 else np.zeros(len(keys), int)
        groups = [(i, pos) for i in range(len(self.indexes)) if len(pos := np.flatnonzero(owner == i))]
        index = [getattr(self.indexes[i], method) for i, _ in groups]
        calls = [
            f.remote(partition_id, _pick(keys, pos), *args(pos, len(pos) == len(keys)))
            for f, (_, pos) in zip(index, groups)
        ]
        return [(pos, reply) for (_, pos), reply in zip(groups, self._get(calls))]

    def _merged(self, what: str, partition_id: str | None) -> dict:
        self._check_open(f"kv_list ({what})")
        merged: dict[str, dict] = {} if partition_id is None else {partition_id: {}}
        for part in self._get([index.listing.remote(partition_id, what) for index in self.indexes]):
            for pid, entries in part.items():
                merged.setdefault(pid, {}).update(entries)
        return merged

    @staticmethod
    def _meta(keys: list[str], partition_id: str, replies: list[tuple[np.ndarray, dict]]) -> KVBatchMeta:
        """The meta of a put or tag update from the index actors' replies (fields held by every key)."""
        tags: list[dict] = []  # KVBatchMeta fills in empty tags
        common: list[str] | None = None
        for pos, reply in replies:
            if reply["tags"] is not None:
                tags = tags or [{} for _ in keys]
                for p, tag in zip(pos.tolist(), reply["tags"]):
                    tags[p] = tag
            common = reply["fields"] if common is None else [f for f in common if f in reply["fields"]]
        return KVBatchMeta(keys=keys, tags=tags, partition_id=partition_id, fields=common or [])

    @staticmethod
    def _get(refs: list) -> list:
        """``ray.get`` with the store's own errors instead of Ray's wrappers."""
        try:
            return ray.get(refs)
        except RayTaskError as err:
            cause = getattr(err, "cause", None)
            raise (cause if isinstance(cause, KVStoreError) else err) from None
        except RayActorError as err:
            raise KVStoreClosedError(
                f"an index actor of the KV store is gone (the store was shut down or the actor died): {err}"
            ) from None
        except (ObjectLostError, OwnerDiedError) as err:
            raise KVStoreError(
                "kv_batch_get: stored rows are lost: the object holding them is gone, usually because the "
                f"process that wrote them exited (rows live as long as their writer; rewrite them): {err}"
            ) from None


def _checked(keys: Sequence[str], op: str) -> list[str]:
    """``keys`` as a list, after checking they are distinct non-empty strings."""
    keys = list(keys)
    try:
        ok = all(keys) and isinstance("".join(keys), str)  # join: a fast type check of every key
    except TypeError:
        ok = False
    if not ok:
        bad = [k for k in keys if not isinstance(k, str) or not k]
        raise KVSchemaError(f"{op}: keys must be non-empty strings, got {preview(bad)}.")
    if len(set(keys)) != len(keys):
        dup = [k for k, count in Counter(keys).items() if count > 1]
        raise KVSchemaError(f"{op}: duplicate keys in one call: {preview(dup)}.")
    return keys


def _pick(items: list, positions: np.ndarray) -> list:
    """The items at ``positions`` (``items`` itself when that is all of them)."""
    return items if len(positions) == len(items) else list(map(items.__getitem__, positions.tolist()))


def index_of_keys(keys: Sequence[str], num_indexes: int) -> np.ndarray:
    """Index actor of each key: a CRC32 of the key modulo ``num_indexes`` (stable across processes)."""
    crcs = np.fromiter(map(zlib.crc32, map(str.encode, keys)), dtype=np.int64, count=len(keys))
    return crcs % num_indexes
