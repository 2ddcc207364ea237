"""Start, find and stop a KV store: its index actors are named Ray actors of the current job.

After ``shutdown_kv_store`` every client of that store raises ``KVStoreClosedError``."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import asdict, replace
from typing import Any

import ray

from verl_lite.kv.client import CLOSED_STORES, KVClient
from verl_lite.kv.config import KVStoreConfig
from verl_lite.kv.errors import KVStoreClosedError, KVStoreError
from verl_lite.kv.index import IndexActor

_NAME_RELEASE_TIMEOUT_S = 10.0
# Stores this process started: their index actors as started (Ray ends an actor once no handle from
# its starting lineage is left, named or not), and the timer that ends one while it is kept.
_started: dict[str, list] = {}
_timers: dict[str, tuple[threading.Timer, str]] = {}  # the timer and the node id of the Ray it started on
_lock = threading.Lock()


def init_kv_store(config: Any = None, *, client_name: str | None = None, **overrides: Any) -> KVClient:
    """Start the index actors of a new store (``config``: a ``KVStoreConfig``, dict or OmegaConf node
    like ``configs/kv/default.yaml``, ``overrides`` on top) and return a client of it named
    ``client_name`` in the store's byte accounting."""
    cfg = KVStoreConfig.from_any(config, **overrides)
    if cfg.num_storage_units is None:
        cfg = replace(cfg, num_storage_units=max(1, sum(1 for node in ray.nodes() if node.get("Alive"))))
    store_id, owner = uuid.uuid4().hex, ray.get_runtime_context().get_worker_id()
    first = _find(cfg.name_prefix, 0)
    with _lock:
        if first is not None and ray.get(first.take.remote(asdict(cfg), store_id, owner)):
            # kept by a run of this process that ended (shutdown_kv_store(keep_s=...)): it serves this store
            _cancel_timer(cfg.name_prefix)
            indexes = _started[cfg.name_prefix]
            ray.get([index.take.remote(asdict(cfg), store_id, owner) for index in indexes[1:]])
            return KVClient(indexes, cfg, store_id, name=client_name)
    if first is not None and ray.get(first.end_if_kept.remote()):  # another config or process
        _end(cfg.name_prefix, ray.get(first.describe.remote())["config"]["num_storage_units"])
    elif first is not None:
        raise KVStoreError(
            f"a KV store with name_prefix {cfg.name_prefix!r} is already running in this Ray job; "
            "call shutdown_kv_store() first or choose another kv.name_prefix."
        )
    actor_cls = ray.remote(IndexActor)
    indexes = [
        # SPREAD: on a cluster the index actors land on different nodes, spreading request load.
        actor_cls.options(name=cfg.index_name(i), num_cpus=0, scheduling_strategy="SPREAD").remote(
            store_id, asdict(cfg), owner
        )
        for i in range(cfg.num_storage_units)
    ]
    with _lock:
        _cancel_timer(cfg.name_prefix)  # one left from a store of an earlier Ray
        _started[cfg.name_prefix] = indexes
    # Named at once (creation registers the name); not waited for: the actors start while the caller
    # goes on (the worker groups load their models meanwhile), and the first call waits for them.
    return KVClient(indexes, cfg, store_id, name=client_name)


def get_kv_client(name: str | None = None, *, name_prefix: str | None = None) -> KVClient:
    """A client named ``name`` (default ``{hostname}:{pid}``) of the running store with
    ``name_prefix`` (default: the job's, ``KVStoreConfig.job_name_prefix``), from any process of the job."""
    name_prefix = name_prefix or KVStoreConfig.job_name_prefix()
    first = _find(name_prefix, 0)
    if first is None:
        raise KVStoreClosedError(
            f"no KV store with name_prefix {name_prefix!r} is running in this Ray job; call init_kv_store() first."
        )
    info = ray.get(first.describe.remote())
    cfg = KVStoreConfig.from_any(info["config"])
    indexes = [first] + [ray.get_actor(cfg.index_name(i)) for i in range(1, cfg.num_storage_units)]
    return KVClient(indexes, cfg, info["store_id"], name=name)


def shutdown_kv_store(name_prefix: str | None = None, *, keep_s: float = 0.0) -> None:
    """Close the store: its clients raise ``KVStoreClosedError`` and Ray frees every object it
    referenced; a no-op when none is running.

    Its index actors are killed, or with ``keep_s > 0`` emptied and kept that many seconds for the next
    ``init_kv_store`` of the same name and config in this Ray job (runs in a row then skip starting them);
    a kept store's clients in other processes are not told (a run keeps it only once its processes are
    ended or rebuilt), and what they send is dropped when it is taken."""
    name_prefix = name_prefix or KVStoreConfig.job_name_prefix()
    first = _find(name_prefix, 0)
    if first is None:
        return
    info = ray.get(first.describe.remote())
    CLOSED_STORES.add(info["store_id"])
    indexes = _started.get(name_prefix)
    if keep_s > 0 and indexes is not None and indexes[0]._actor_id == first._actor_id:
        ray.get([index.keep.remote() for index in indexes])
        timer = threading.Timer(keep_s, _end_if_kept, (name_prefix,))
        timer.daemon = True
        with _lock:
            _cancel_timer(name_prefix)
            _timers[name_prefix] = (timer, ray.get_runtime_context().get_node_id())
        timer.start()
        return
    _end(name_prefix, info["config"]["num_storage_units"])


def _end_if_kept(name_prefix: str) -> None:
    """End the store named ``name_prefix`` if it is still kept (no ``init_kv_store`` took it)."""
    with _lock:
        timer, on_ray = _timers.pop(name_prefix, (None, None))
        if timer is None or not ray.is_initialized() or ray.get_runtime_context().get_node_id() != on_ray:
            return  # taken, or kept on a Ray that was shut down since (the store went with it)
        indexes = _started[name_prefix]
        try:
            if not ray.get(indexes[0].end_if_kept.remote()):
                return
        except ray.exceptions.RayActorError:  # another process ended it to start its own store
            _started.pop(name_prefix, None)
            return
    _end(name_prefix, len(indexes))


def _cancel_timer(name_prefix: str) -> None:
    if (timer := _timers.pop(name_prefix, None)) is not None:
        timer[0].cancel()


def _end(name_prefix: str, num_indexes: int) -> None:
    """Kill the index actors named with ``name_prefix`` and wait until their names are free."""
    _started.pop(name_prefix, None)
    for index in filter(None, (_find(name_prefix, i) for i in range(num_indexes))):
        ray.kill(index)
    # Names are released asynchronously; wait so an immediate init_kv_store() can reuse them.
    deadline = time.monotonic() + _NAME_RELEASE_TIMEOUT_S
    while any(_find(name_prefix, i) is not None for i in range(num_indexes)):
        if time.monotonic() > deadline:
            raise KVStoreError(
                f"KV store {name_prefix!r}: index names still taken after {_NAME_RELEASE_TIMEOUT_S}s."
            )
        time.sleep(0.01)


def _find(name_prefix: str, index: int):
    try:
        return ray.get_actor(KVStoreConfig(name_prefix=name_prefix).index_name(index))
    except ValueError:
        return None
