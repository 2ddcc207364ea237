"""Start, find and stop a KV store: its storage units are named Ray actors of the current job.

``init_kv_store`` (controller or TaskRunner) creates the units; ``get_kv_client`` in any worker
of the same Ray job finds them by name; ``shutdown_kv_store`` kills them, after which every
client of that store raises ``KVStoreClosedError``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, replace
from typing import Any

import ray

from verl_lite.kv.channel import new_secret
from verl_lite.kv.client import _CLOSED_STORES, KVClient
from verl_lite.kv.config import KVStoreConfig
from verl_lite.kv.errors import KVStoreClosedError, KVStoreError
from verl_lite.kv.unit import StorageUnit

# This process's clients, by (name_prefix, client name); reused while their store is alive.
_CLIENTS: dict[tuple[str, str | None], KVClient] = {}
_NAME_RELEASE_TIMEOUT_S = 10.0


def init_kv_store(config: Any = None, *, client_name: str | None = None, **overrides: Any) -> KVClient:
    """Start the storage units of a new store and return a client of it.

    Args:
        config: a ``KVStoreConfig``, a dict or an OmegaConf node shaped like ``configs/kv/default.yaml``.
        client_name: name of the returned client in the store's byte accounting (e.g. ``"controller"``).
        **overrides: config keys set on top of ``config`` (``num_storage_units=2``; unset or
            ``None``: one unit per node, since units hold only keys, tags and row locations).
    """
    cfg = KVStoreConfig.from_any(config, **overrides)
    if cfg.num_storage_units is None:
        cfg = replace(cfg, num_storage_units=_alive_nodes())
    if _find_unit(cfg.name_prefix, 0) is not None:
        raise KVStoreError(
            f"a KV store with name_prefix {cfg.name_prefix!r} is already running in this Ray job; "
            "call shutdown_kv_store() first or choose another kv.name_prefix."
        )
    store_id = uuid.uuid4().hex
    secret = new_secret()  # for the units' socket channel; clients receive it through Ray
    actor_cls = ray.remote(StorageUnit)
    units = [
        actor_cls.options(
            name=cfg.unit_name(i),
            num_cpus=0,
            # On a cluster the units land on different nodes, spreading memory and request load.
            scheduling_strategy="SPREAD",
        ).remote(i, cfg.num_storage_units, store_id, asdict(cfg), secret)
        for i in range(cfg.num_storage_units)
    ]
    client = KVClient(
        units, cfg, store_id, ray.get([unit.describe.remote() for unit in units]), name=client_name
    )
    _CLIENTS[(cfg.name_prefix, client_name)] = client
    return client


def get_kv_client(name: str | None = None, *, name_prefix: str | None = None) -> KVClient:
    """A client of the running store, from any process of the same Ray job.

    Args:
        name: the client's name in the store's byte accounting (default ``{hostname}:{pid}``).
        name_prefix: the store's ``kv.name_prefix`` (default: the job's, see ``KVStoreConfig.job_name_prefix``).
    """
    name_prefix = name_prefix or KVStoreConfig.job_name_prefix()
    unit0 = _find_unit(name_prefix, 0)
    if unit0 is None:
        raise KVStoreClosedError(
            f"no KV store with name_prefix {name_prefix!r} is running in this Ray job; call init_kv_store() first."
        )
    info = ray.get(unit0.describe.remote())
    cached = _CLIENTS.get((name_prefix, name))
    if cached is not None and cached.store_id == info["store_id"]:
        return cached
    cfg = KVStoreConfig.from_any(info["config"])
    units = [unit0] + [ray.get_actor(cfg.unit_name(i)) for i in range(1, info["num_units"])]
    infos = [info] + ray.get([u.describe.remote() for u in units[1:]])
    client = KVClient(units, cfg, info["store_id"], infos, name=name)
    _CLIENTS[(name_prefix, name)] = client
    return client


def shutdown_kv_store(name_prefix: str | None = None) -> None:
    """Kill the store's units (freeing everything they hold); a no-op when none is running."""
    name_prefix = name_prefix or KVStoreConfig.job_name_prefix()
    unit0 = _find_unit(name_prefix, 0)
    if unit0 is None:
        return
    info = ray.get(unit0.describe.remote())
    _CLOSED_STORES.add(info["store_id"])
    cfg = KVStoreConfig.from_any(info["config"])
    for i in range(info["num_units"]):
        unit = _find_unit(name_prefix, i)
        if unit is not None:
            ray.kill(unit)
    for key in [k for k in _CLIENTS if k[0] == name_prefix]:
        del _CLIENTS[key]
    # Names are released asynchronously; wait so an immediate init_kv_store() can reuse them.
    deadline = time.monotonic() + _NAME_RELEASE_TIMEOUT_S
    while any(_find_unit(name_prefix, i) is not None for i in range(cfg.num_storage_units)):
        if time.monotonic() > deadline:
            raise KVStoreError(
                f"KV store {name_prefix!r}: unit names still taken {_NAME_RELEASE_TIMEOUT_S}s after kill."
            )
        time.sleep(0.01)


def _alive_nodes() -> int:
    """Nodes of the Ray cluster that are up (at least 1)."""
    return max(1, sum(1 for node in ray.nodes() if node.get("Alive")))


def _find_unit(name_prefix: str, index: int):
    try:
        return ray.get_actor(f"{name_prefix}_unit_{index}")
    except ValueError:
        return None
