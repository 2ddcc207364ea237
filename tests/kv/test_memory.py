"""The store references each put's object until its last row is cleared or overwritten; then Ray frees it."""

import time

import ray
import torch
from ray._private.internal_api import get_memory_info_reply, get_state_from_address
from tensordict import TensorDict


def object_store_bytes() -> int:
    # This job's cluster by address: other Ray instances on the machine must not be picked.
    state = get_state_from_address(ray.get_runtime_context().gcs_address)
    return int(get_memory_info_reply(state).store_stats.object_store_bytes_used)


def wait_for_store_bytes(at_most: int, timeout_s: float = 20.0) -> int:
    deadline = time.monotonic() + timeout_s  # frees reach the object store asynchronously
    while (used := object_store_bytes()) > at_most and time.monotonic() < deadline:
        time.sleep(0.1)
    return used


def batch(rows: int) -> TensorDict:
    """``rows`` x 1024 int64 ids: 8 KiB per row."""
    return TensorDict({"ids": torch.randint(0, 32000, (rows, 1024))}, batch_size=[rows])


def test_an_object_lives_until_its_last_row_is_cleared(kv_client, partition):
    keys = [f"r{i}" for i in range(512)]  # 4 MiB, spread over both index actors
    base = object_store_bytes()
    kv_client.kv_batch_put(keys, partition, fields=batch(512))
    assert kv_client.stats()["object_bytes"] == 512 * 8192
    assert object_store_bytes() >= base + 4 * 1024**2
    kv_client.kv_clear(keys[:500], partition)
    assert kv_client.kv_batch_get(keys[500:], partition)["ids"].shape == (12, 1024)  # still readable
    stats = kv_client.stats()  # the object is kept whole while any of its rows is in use
    assert stats["object_bytes"] == 512 * 8192 and stats["partitions"][partition]["bytes"] == 12 * 8192
    kv_client.kv_clear(keys[500:], partition)
    assert kv_client.stats()["objects"] == 0
    assert wait_for_store_bytes(base + 1024**2) <= base + 1024**2


def test_overwriting_every_row_of_a_put_frees_its_object(kv_client, partition):
    keys = [f"o{i}" for i in range(256)]
    kv_client.kv_batch_put(keys, partition, fields=batch(256))
    base = object_store_bytes()
    for _ in range(5):  # each put replaces the previous one's rows
        kv_client.kv_batch_put(keys, partition, fields=batch(256))
    stats = kv_client.stats()
    assert stats["object_bytes"] == 256 * 8192 and stats["partitions"][partition]["bytes"] == 256 * 8192
    assert wait_for_store_bytes(base + 1024**2) <= base + 1024**2


def test_put_get_clear_cycles_return_the_object_store_to_where_it_was(kv_client, partition):
    keys = [f"m{i}_0_0" for i in range(256)]
    td = batch(256)
    base = object_store_bytes()
    for _ in range(50):
        kv_client.kv_batch_put(keys, partition, fields=td)
        assert kv_client.kv_batch_get(keys[:8], partition)["ids"].shape == (8, 1024)
        kv_client.kv_clear(keys, partition)
    assert kv_client.stats()["objects"] == 0
    assert wait_for_store_bytes(base + 1024**2) <= base + 1024**2
