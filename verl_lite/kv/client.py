"""Read and write keys of the KV store: columns through Ray's object store, control through index actors.

A put ``ray.put``s its columns once (numpy arrays: Ray's zero-copy path) and sends the object
reference, with the keys, tags and per-row sizes, to every index actor that holds some of the
keys (keys are spread by a hash), all in one round of actor calls. A get asks those actors where
its keys' rows are, ``ray.get``s each object once (a zero-copy map on the object's node) and
returns views when a field's rows are one run of one put, else gathers them once.

The client is synchronous; asyncio code calls it through ``asyncio.to_thread``.
"""

from __future__ import annotations

import os
import socket
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import ray
from ray.exceptions import ObjectLostError, OwnerDiedError, RayActorError, RayTaskError
from tensordict import TensorDict, TensorDictBase

from verl_lite.kv.columns import Source, assemble_field, build_tensordict, columns_of, row_nbytes, schema_of
from verl_lite.kv.config import KVStoreConfig
from verl_lite.kv.errors import KVFieldError, KVSchemaError, KVStoreClosedError, KVStoreError, preview
from verl_lite.kv.index import join_keys
from verl_lite.kv.keys import index_of_keys
from verl_lite.kv.meta import KVBatchMeta

# Stores shut down from this process; their clients fail fast instead of calling dead actors.
CLOSED_STORES: set[str] = set()


class KVClient:
    """Blocking client of a KV store; safe to pickle into other Ray workers of the same job
    (there it reports under that process's default name in the store's byte accounting)."""

    def __init__(self, indexes: list, config: KVStoreConfig, store_id: str, name: str | None = None):
        self.indexes = list(indexes)
        self.config = config
        self.store_id = store_id
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"

    def __reduce__(self):
        return (KVClient, (self.indexes, self.config, self.store_id))

    def __repr__(self) -> str:
        return (
            f"KVClient(name={self.name!r}, indexes={len(self.indexes)}, prefix={self.config.name_prefix!r})"
        )

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
        keys = _checked(keys, "kv_batch_put")
        if tags is not None and len(tags) != len(keys):
            raise KVSchemaError(f"kv_batch_put: got {len(keys)} keys but {len(tags)} tags.")
        columns: dict[str, tuple] = {}
        if fields is not None:
            rows = int(fields.batch_size[0]) if fields.batch_dims else 0
            if rows != len(keys):
                raise KVSchemaError(f"kv_batch_put: got {len(keys)} keys but the fields have {rows} rows.")
            columns = columns_of(fields)
        self._check_open("kv_batch_put")
        specs = {name: (tuple(schema_of(col)), row_nbytes(col)) for name, col in columns.items()}
        boxed = [ray.put(columns)] if columns and keys else None  # boxed: actors get the reference
        calls, groups = [], self._groups(keys)
        for i, positions in groups:
            whole = len(positions) == len(keys)
            part_specs = specs if whole else {n: (s, _take(b, positions)) for n, (s, b) in specs.items()}
            calls.append(
                self.indexes[i].put.remote(
                    partition_id,
                    join_keys(_pick(keys, positions)),
                    None if tags is None else _pick(list(tags), positions),
                    part_specs,
                    boxed,
                    None if whole else positions,
                    self.name,
                )
            )
        return self._meta(keys, partition_id, groups, self._get(calls))

    def kv_batch_get(
        self, keys: Sequence[str], partition_id: str, select_fields: Sequence[str] | None = None
    ) -> TensorDict:
        """Read fields of ``keys`` (every field the keys hold when ``select_fields`` is None).

        Rows of different lengths come back as jagged nested tensors. When a field's rows are
        one run of a single put (keys read in the order they were written, the common case) the
        tensor is a read-only view of the object in Ray's object store, as ``ray.get`` returns;
        other reads gather the rows into fresh tensors.
        """
        keys = keys if isinstance(keys, list) else list(keys)
        if not keys:
            return TensorDict({}, batch_size=[0])
        self._check_open("kv_batch_get")
        fields = None if select_fields is None else list(select_fields)
        groups = self._groups(keys)
        replies = self._get(
            [
                self.indexes[i].get.remote(partition_id, join_keys(_pick(keys, pos)), fields, self.name)
                for i, pos in groups
            ]
        )
        names = replies[0]["fields"]
        for (_, pos), reply in zip(groups[1:], replies[1:]):
            if set(reply["fields"]) != set(names):
                raise KVFieldError(
                    f"kv_batch_get: the keys hold different fields ({sorted(names)} vs {sorted(reply['fields'])} "
                    f"for keys such as {keys[pos[0]]!r}) in partition {partition_id!r}; pass select_fields."
                )
        # Index actors holding keys of the same put name the same object: fetch each one once.
        refs = list(dict.fromkeys(ref for reply in replies for ref in reply["refs"].values()))
        stored = dict(zip(refs, self._get(refs)))
        outputs = {}
        for name in names:
            sources = []
            for (_, pos), reply in zip(groups, replies):
                objs, rows = reply["cells"][name]
                objs = np.full(len(pos), objs) if isinstance(objs, int) else objs
                rows = np.arange(rows, rows + len(pos)) if isinstance(rows, int) else rows
                ids = np.unique(objs).tolist()
                if len(ids) == 1:  # the common case: the rows of one put
                    sources.append(Source(stored[reply["refs"][ids[0]]][name], rows, pos))
                    continue
                for obj in ids:
                    at = objs == obj
                    sources.append(Source(stored[reply["refs"][obj]][name], rows[at], pos[at]))
            outputs[name] = assemble_field(name, len(keys), sources)
        return build_tensordict(len(keys), outputs)

    def kv_list(self, partition_id: str | None = None) -> dict[str, dict[str, dict]]:
        """``{partition: {key: tag}}`` for one partition or all; reads tags only, never fields."""
        return self._merged("list_tags", partition_id)

    def kv_field_names(self, partition_id: str | None = None) -> dict[str, dict[str, list[str]]]:
        """``{partition: {key: [field, ...]}}``: which fields each key holds."""
        return self._merged("field_names", partition_id)

    def kv_update_tags(self, keys: Sequence[str], partition_id: str, tags: Sequence[dict]) -> KVBatchMeta:
        """Merge ``tags`` into the tags of existing ``keys`` (a missing key raises ``KVKeyError``)."""
        keys = _checked(keys, "kv_update_tags")
        if len(tags) != len(keys):
            raise KVSchemaError(f"kv_update_tags: got {len(keys)} keys but {len(tags)} tags.")
        self._check_open("kv_update_tags")
        groups = self._groups(keys)
        calls = [
            self.indexes[i].update_tags.remote(
                partition_id, join_keys(_pick(keys, pos)), _pick(list(tags), pos)
            )
            for i, pos in groups
        ]
        return self._meta(keys, partition_id, groups, self._get(calls))

    def kv_clear(self, keys: Sequence[str] | None, partition_id: str) -> int:
        """Delete ``keys`` (every key of the partition when ``None``); returns how many existed.
        Objects no key uses any more are freed by Ray."""
        self._check_open("kv_clear")
        if keys is None:
            calls = [index.clear.remote(partition_id, None) for index in self.indexes]
        else:
            keys = list(keys)
            calls = [
                self.indexes[i].clear.remote(partition_id, join_keys(_pick(keys, pos)))
                for i, pos in self._groups(keys)
            ]
        return int(sum(self._get(calls)))

    def stats(self) -> dict:
        """Keys and bytes per partition (``partitions``), objects the store references and their
        bytes (``objects``, ``object_bytes``), and per-client I/O (``io``), summed over index actors."""
        self._check_open("stats")
        total: dict[str, Any] = {"partitions": {}, "objects": 0, "object_bytes": 0, "io": {}}
        zero = dict.fromkeys(("bytes_written", "bytes_read", "puts", "gets"), 0)
        for s in self._get([index.stats.remote() for index in self.indexes]):
            total["objects"] += s["objects"]
            total["object_bytes"] += s["object_bytes"]
            for group in ("partitions", "io"):
                for name, counters in s[group].items():
                    total[group].setdefault(name, Counter(zero if group == "io" else {})).update(counters)
        return {**total, **{g: {k: dict(v) for k, v in total[g].items()} for g in ("partitions", "io")}}

    def io_accounting(self) -> dict[str, dict[str, int]]:
        """Tensor bytes written and read (and put/get calls) per client name."""
        return self.stats()["io"]

    def _check_open(self, op: str) -> None:
        if self.store_id in CLOSED_STORES:
            raise KVStoreClosedError(
                f"{op}: the KV store was shut down (shutdown_kv_store()); start one with init_kv_store()."
            )

    def _groups(self, keys: list[str]) -> list[tuple[int, np.ndarray]]:
        """``(index actor, positions in keys)`` for every index actor holding some of ``keys``."""
        if len(self.indexes) == 1:
            return [(0, np.arange(len(keys)))] if keys else []
        owner = index_of_keys(keys, len(self.indexes))
        return [(i, pos) for i in range(len(self.indexes)) if len(pos := np.flatnonzero(owner == i))]

    def _merged(self, method: str, partition_id: str | None) -> dict:
        self._check_open("kv_list")
        merged: dict[str, dict] = {} if partition_id is None else {partition_id: {}}
        for part in self._get([getattr(index, method).remote(partition_id) for index in self.indexes]):
            for pid, entries in part.items():
                merged.setdefault(pid, {}).update(entries)
        return merged

    @staticmethod
    def _meta(keys: list[str], partition_id: str, groups: list, replies: list[dict]) -> KVBatchMeta:
        """The meta of a put or tag update from the index actors' replies (fields held by every key)."""
        tags: list[dict] = []
        common: list[str] | None = None
        for (_, pos), reply in zip(groups, replies):
            if reply["tags"] is not None:
                tags = tags or [{} for _ in keys]
                for p, tag in zip(pos.tolist(), reply["tags"]):
                    tags[p] = tag
            common = reply["fields"] if common is None else [f for f in common if f in reply["fields"]]
        return KVBatchMeta(keys=keys, tags=tags, partition_id=partition_id, fields=common or [])

    def _get(self, refs: list) -> list:
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
                "process that wrote them exited (rows live as long as their writer's process; rewrite them "
                f"from a live process): {err}"
            ) from None


def _checked(keys: Sequence[str], op: str) -> list[str]:
    """``keys`` as a list, after checking they are distinct non-empty strings."""
    keys = list(keys)
    try:
        ok = all(keys) and bool("".join(keys) or not keys)  # str.join: a fast type check of every key
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


def _take(row_bytes: int | np.ndarray, positions: np.ndarray) -> int | np.ndarray:
    """Bytes per row of the rows at ``positions`` (an int stands for every row)."""
    return row_bytes[positions] if isinstance(row_bytes, np.ndarray) else row_bytes
