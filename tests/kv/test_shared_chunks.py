"""Puts above the inline size are one object shared by the units; in-order reads are views of it."""

import numpy as np
import torch
from tensordict import TensorDict

from verl_lite.kv.keys import unit_of_keys
from verl_lite.protocol import make_batch, to_jagged


def big_batch(n: int, seed: int = 0) -> TensorDict:
    """Dense, jagged, bf16 and python fields; over 64 KB for n >= 128, so it travels by reference."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 64, (n,), generator=g).tolist()
    return make_batch(
        {
            "ids": torch.randint(0, 1000, (n, 64), generator=g),
            "responses": to_jagged([torch.randint(0, 1000, (k,), generator=g) for k in lengths]),
            "ref_log_prob": torch.randn(n, 8, generator=g).to(torch.bfloat16),
            "data_source": [f"src{i % 3}" for i in range(n)],
        }
    )


def assert_rows(back: TensorDict, td: TensorDict, index: list[int]) -> None:
    expected = td[torch.tensor(index)]
    assert torch.equal(back["ids"], expected["ids"])
    assert back["ref_log_prob"].dtype == torch.bfloat16 and torch.equal(
        back["ref_log_prob"], expected["ref_log_prob"]
    )
    assert torch.equal(back["responses"].offsets(), expected["responses"].offsets())
    assert torch.equal(back["responses"].values(), expected["responses"].values())
    assert back["data_source"].tolist() == expected["data_source"].tolist()


def chunks_per_unit(client) -> list[int]:
    return [u["num_chunks"] for u in client.stats()["units"]]


def test_in_order_reads_are_views_other_orders_are_gathered_and_copy_true_is_private(kv_client, partition):
    td = big_batch(256)
    keys = [f"v{i}_0_0" for i in range(256)]
    kv_client.kv_batch_put(keys, partition, fields=td)
    a = kv_client.kv_batch_get(keys, partition)
    b = kv_client.kv_batch_get(keys, partition)
    assert_rows(a, td, list(range(256)))
    assert a["ids"].data_ptr() == b["ids"].data_ptr()  # both map the one stored object
    assert a["responses"].values().data_ptr() == b["responses"].values().data_ptr()
    part = kv_client.kv_batch_get(keys[10:20], partition)  # a run inside the put: a view too
    assert_rows(part, td, list(range(10, 20)))
    assert part["ids"].data_ptr() == a["ids"][10].data_ptr()
    assert_rows(kv_client.kv_batch_get(keys[::-1], partition), td, list(range(255, -1, -1)))
    private = kv_client.kv_batch_get(keys, partition, copy=True)
    assert private["ids"].data_ptr() != a["ids"].data_ptr()
    private["ids"].add_(1)
    assert torch.equal(kv_client.kv_batch_get(keys, partition)["ids"], td["ids"])
    padded = kv_client.kv_batch_get(keys, partition, select_fields=["responses"], padded=True)
    assert torch.equal(padded["responses"][padded["responses_pad_mask"]], td["responses"].values())


def test_a_put_spanning_units_is_one_object_kept_until_every_unit_drops_it(kv_client, partition):
    before = chunks_per_unit(kv_client)
    td = big_batch(200, seed=1)
    keys = [f"s{i}_0_0" for i in range(200)]
    units = unit_of_keys(keys, 2)
    kv_client.kv_batch_put(keys, partition, fields=td)
    assert [c - b for c, b in zip(chunks_per_unit(kv_client), before)] == [1, 1]
    on_0 = np.flatnonzero(units == 0).tolist()
    on_1 = np.flatnonzero(units == 1).tolist()
    kv_client.kv_clear([keys[i] for i in on_0], partition)
    assert [c - b for c, b in zip(chunks_per_unit(kv_client), before)] == [0, 1]
    assert_rows(kv_client.kv_batch_get([keys[i] for i in on_1], partition), td, on_1)
    kv_client.kv_clear([keys[i] for i in on_1], partition)
    assert chunks_per_unit(kv_client) == before


def test_overwriting_some_rows_keeps_the_rest_of_the_old_put_and_bytes_follow(kv_client, partition):
    ids = torch.arange(256 * 64).view(256, 64)  # 128 KB: by reference
    keys = [f"o{i}" for i in range(256)]
    kv_client.kv_batch_put(keys, partition, fields=TensorDict({"ids": ids}, [256]))
    base = chunks_per_unit(kv_client)
    kv_client.kv_batch_put(keys[:100], partition, fields=TensorDict({"ids": -ids[:100]}, [100]))
    back = kv_client.kv_batch_get(keys, partition)["ids"]  # rows from two puts: gathered
    assert torch.equal(back[:100], -ids[:100]) and torch.equal(back[100:], ids[100:])
    stats = kv_client.stats()
    assert stats["partitions"][partition] == {"keys": 256, "bytes": 256 * 64 * 8}
    read_before = stats["io"]["test-driver"]["bytes_read"]
    kv_client.kv_batch_get(keys[100:110], partition)
    assert kv_client.io_accounting()["test-driver"]["bytes_read"] - read_before == 10 * 64 * 8
    kv_client.kv_clear(keys[100:], partition)  # the last rows of the first put: its objects go
    assert sum(chunks_per_unit(kv_client)) == sum(base)  # first put's 2 chunks out, second's 2 in
    assert kv_client.stats()["partitions"][partition] == {"keys": 100, "bytes": 100 * 64 * 8}
