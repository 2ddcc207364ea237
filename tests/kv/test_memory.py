"""kv_clear releases memory: 1000 put/get/clear cycles of a 4 MB batch do not grow the storage units.

A unit's resident memory has two parts: its own heap (``rss_anon_bytes``: keys, tags, cells) and
object-store pages it has mapped while writing chunks (``rss_shmem_bytes``). The second grows
while the store's allocator cycles through its arena and is bounded by the object store's size;
it is not memory the unit holds. What must stay flat is the heap, and the object store's used
bytes must return to where they were.
"""

import time

import ray
import torch
from ray._private.internal_api import get_memory_info_reply, get_state_from_address
from tensordict import TensorDict

from tests.conftest import RAY_TEST_OBJECT_STORE_BYTES


def object_store_bytes() -> int:
    # This job's cluster by address: other Ray instances on the machine must not be picked.
    state = get_state_from_address(ray.get_runtime_context().gcs_address)
    return int(get_memory_info_reply(state).store_stats.object_store_bytes_used)


def test_put_get_clear_cycles_keep_unit_memory_flat(kv_client, partition):
    rows = 256  # 256 x 1024 x (8 + 4 + 4) bytes = 4 MiB per batch
    td = TensorDict(
        {
            "input_ids": torch.randint(0, 32000, (rows, 1024)),
            "old_log_probs": torch.randn(rows, 1024),
            "values": torch.randn(rows, 1024),
        },
        batch_size=[rows],
    )
    keys = [f"m{i}_0_0" for i in range(rows)]
    for cycle in range(1000):
        kv_client.kv_batch_put(keys, partition, fields=td)
        assert kv_client.kv_batch_get(keys[:8], partition, select_fields=["values"])["values"].shape == (
            8,
            1024,
        )
        kv_client.kv_clear(keys, partition)
        if cycle == 49:
            settled, store_settled = kv_client.stats()["units"], object_store_bytes()
    final = kv_client.stats()["units"]
    assert all(u["num_chunks"] == 0 and u["chunk_bytes"] == 0 for u in final)
    for before, after in zip(settled, final):
        heap_before, heap_after = before["rss_anon_bytes"], after["rss_anon_bytes"]
        assert abs(heap_after - heap_before) <= 0.1 * heap_before, (
            f"unit heap {heap_before} -> {heap_after} bytes"
        )
        assert after["rss_shmem_bytes"] <= RAY_TEST_OBJECT_STORE_BYTES
    deadline = time.monotonic() + 20  # frees reach the object store asynchronously
    while object_store_bytes() > store_settled + 4 * 1024**2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert object_store_bytes() <= store_settled + 4 * 1024**2
