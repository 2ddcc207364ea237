"""verl_lite's data plane: a sharded key-value store of trajectory fields and tags on Ray.

Column data lives in Ray's object store; a few index actors hold keys, tags and where rows live.
Workers write and read directly, so the controller moves :class:`KVBatchMeta` (keys and tags), not tensors.

    client = init_kv_store(num_storage_units=2)               # controller / TaskRunner
    meta = client.kv_batch_put(keys, "train", fields=td, tags=tags)
    td = get_kv_client().kv_batch_get(meta.keys, "train", select_fields=["responses"])
"""

from __future__ import annotations

import importlib
from typing import Any

# Public name -> defining module, imported on first use (an index actor's process never imports torch).
_LAZY = {
    name: f"verl_lite.kv.{module}"
    for module, names in {
        "client": "KVClient",
        "config": "KVStoreConfig",
        "errors": "KVStoreError KVKeyError KVFieldError KVSchemaError KVStoreClosedError",
        "meta": "KVBatchMeta",
        "store": "init_kv_store get_kv_client shutdown_kv_store",
    }.items()
    for name in names.split()
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
