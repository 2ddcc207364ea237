"""Start, find and stop a KV store: its index actors are named Ray actors of the current job.

After ``shutdown_kv_store`` every client of that store raises ``KVStoreClosedError``."""

from __future__ import annotations

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


def init_kv_store(config: Any = None, *, client_name: str | None = None, **overrides: Any) -> KVClient:
    """Start the index actors of a new store (``config``: a ``KVStoreConfig``, dict or OmegaConf node
    like ``configs/kv/default.yaml``, ``overrides`` on top) and return a client of it named
    ``client_name`` in the store's byte accounting."""
    cfg = KVStoreConfig.from_any(config, **overrides)
    if cfg.num_storage_units is None:
        cfg = replace(cfg, num_storage_units=max(1, sum(1 for node in ray.nodes() if node.get("Alive"))))
    if _find(cfg.name_prefix, 0) is not None:
        raise KVStoreError(
            f"a KV store with name_prefix {cfg.name_prefix!r} is already running in this Ray job; "
            "call shutdown_kv_store() first or choose another kv.name_prefix."
        )
    store_id = uuid.uuid4().hex
    actor_cls = ray.remote(IndexActor)
    indexes = [
        # SPREAD: on a cluster the index actors land on different nodes, spreading request load.
        actor_cls.options(name=cfg.index_name(i), num_cpus=0, scheduling_strategy="SPREAD").remote(
            i, cfg.num_storage_units, store_id, asdict(cfg)
        )
        for i in range(cfg.num_storage_units)
    ]
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
    indexes = [first] + [ray.get_actor(cfg.index_name(i)) for i in range(1, info["num_indexes"])]
    return KVClient(indexes, cfg, info["store_id"], name=name)


def shutdown_kv_store(name_prefix: str | None = None) -> None:
    """Kill the store's index actors (Ray then frees every object they referenced); a no-op when
    none is running."""
    name_prefix = name_prefix or KVStoreConfig.job_name_prefix()
    first = _find(name_prefix, 0)
    if first is None:
        return
    info = ray.get(first.describe.remote())
    CLOSED_STORES.add(info["store_id"])
    for index in filter(None, (_find(name_prefix, i) for i in range(info["num_indexes"]))):
        ray.kill(index)
    # Names are released asynchronously; wait so an immediate init_kv_store() can reuse them.
    deadline = time.monotonic() + _NAME_RELEASE_TIMEOUT_S
    while any(_find(name_prefix, i) is not None for i in range(info["num_indexes"])):
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
