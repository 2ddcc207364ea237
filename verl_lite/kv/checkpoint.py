"""Save one partition of the KV store (keys, tags, fields) into a checkpoint and restore it.

Used by ``ReplayBuffer.state_dict``; take the snapshot while writers are paused (between steps).
Fields travel as ``verl_lite.transport.PackedTensorDict`` (numpy arrays), which ``torch.save`` handles.
"""

from __future__ import annotations

from typing import Any

from verl_lite.kv.client import KVClient
from verl_lite.kv.meta import KVBatchMeta
from verl_lite.transport import pack, unpack


def partition_state_dict(client: KVClient, partition_id: str) -> dict[str, Any]:
    """Everything ``partition_id`` holds: tags of every key, and fields grouped by field set."""
    tags = client.kv_list(partition_id)[partition_id]
    field_names = client.kv_field_names(partition_id)[partition_id]
    by_fields: dict[tuple[str, ...], list[str]] = {}
    for key in tags:
        by_fields.setdefault(tuple(field_names.get(key, ())), []).append(key)
    batches = []
    for fields, keys in by_fields.items():
        packed = pack(client.kv_batch_get(keys, partition_id, select_fields=list(fields))) if fields else None
        batches.append({"keys": keys, "fields": packed})
    return {"partition_id": partition_id, "tags": tags, "batches": batches}


def load_partition_state_dict(client: KVClient, state: dict[str, Any]) -> KVBatchMeta:
    """Write a :func:`partition_state_dict` snapshot back; returns the meta of every restored key."""
    partition_id = state["partition_id"]
    metas = []
    for batch in state["batches"]:
        keys = batch["keys"]
        fields = unpack(batch["fields"]) if batch["fields"] is not None else None
        tags = [state["tags"][k] for k in keys]
        metas.append(client.kv_batch_put(keys, partition_id, fields=fields, tags=tags))
    if not metas:
        return KVBatchMeta(keys=[], partition_id=partition_id)
    return KVBatchMeta.concat(metas)
