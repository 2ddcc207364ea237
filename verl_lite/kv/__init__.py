"""verl_lite's data plane: a sharded key-value store of trajectory fields and tags on Ray.

Column data lives in Ray's object store (written by ``ray.put``, read zero-copy by ``ray.get``);
a few index actors hold keys, tags and where each row lives. Clients in the controller and in
every worker write and read directly, so token tensors never pass through the controller,
which moves :class:`KVBatchMeta` (keys and tags) instead.

    client = init_kv_store(num_storage_units=2)               # controller / TaskRunner
    meta = client.kv_batch_put(keys, "train", fields=td, tags=tags)
    td = get_kv_client().kv_batch_get(meta.keys, "train", select_fields=["responses"])

Names are imported on first use: an index actor's process imports ``verl_lite.kv.index`` (numpy
and Ray only) without paying for torch and tensordict.
"""

from __future__ import annotations

import importlib
from typing import Any

# Public name -> defining module.
_LAZY = {
    "KVClient": "verl_lite.kv.client",
    "KVStoreConfig": "verl_lite.kv.config",
    "KVStoreError": "verl_lite.kv.errors",
    "KVKeyError": "verl_lite.kv.errors",
    "KVFieldError": "verl_lite.kv.errors",
    "KVSchemaError": "verl_lite.kv.errors",
    "KVStoreClosedError": "verl_lite.kv.errors",
    "PENDING": "verl_lite.kv.keys",
    "RUNNING": "verl_lite.kv.keys",
    "FINISHED": "verl_lite.kv.keys",
    "FAILURE": "verl_lite.kv.keys",
    "SUCCESS": "verl_lite.kv.keys",
    "GROUP_STATUSES": "verl_lite.kv.keys",
    "group_of": "verl_lite.kv.keys",
    "group_tag": "verl_lite.kv.keys",
    "is_group_marker": "verl_lite.kv.keys",
    "parse_trajectory_key": "verl_lite.kv.keys",
    "trajectory_key": "verl_lite.kv.keys",
    "trajectory_tag": "verl_lite.kv.keys",
    "KVBatchMeta": "verl_lite.kv.meta",
    "init_kv_store": "verl_lite.kv.store",
    "get_kv_client": "verl_lite.kv.store",
    "shutdown_kv_store": "verl_lite.kv.store",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'verl_lite.kv' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
