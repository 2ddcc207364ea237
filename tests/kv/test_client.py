"""Reading and writing through KVClient on a real local Ray: round trips, partial reads, tags, fields."""

import pytest
import torch
from tensordict import TensorDict

from tests.batches import make_batch
from verl_lite.kv import KVBatchMeta, KVKeyError
from verl_lite.protocol import to_jagged


def trajectories(n: int, seed: int = 0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 40, (n,), generator=g).tolist()
    return make_batch(
        {
            "input_ids": torch.randint(0, 1000, (n, 16), generator=g),
            "ref_log_prob": torch.randn(n, 16, generator=g).to(torch.bfloat16),
            "responses": to_jagged([torch.randint(0, 1000, (k,), generator=g) for k in lengths]),
            "rollout_log_probs": to_jagged([torch.randn(k, generator=g) for k in lengths]),
            "response_mask": to_jagged([torch.ones(k, dtype=torch.bool) for k in lengths]),
            "rm_scores": torch.randn(n, generator=g),
            "data_source": [f"src{i % 3}" for i in range(n)],
        }
    )


def assert_same(a, b):
    if a.is_nested:
        assert torch.equal(a.offsets(), b.offsets()) and torch.equal(a.values(), b.values())
    else:
        assert a.dtype == b.dtype and torch.equal(a, b)


def test_dense_and_jagged_fields_round_trip_bit_exactly_in_key_order(kv_client, partition):
    td = trajectories(24)
    keys = [f"u{i}_0_0" for i in range(24)]
    meta = kv_client.kv_batch_put(keys, partition, fields=td)
    assert isinstance(meta, KVBatchMeta) and meta.keys == keys and sorted(meta.fields) == sorted(td.keys())
    back = kv_client.kv_batch_get(keys[::-1], partition)  # any order, rows follow the keys
    for name in td.keys():
        if name == "data_source":
            assert back[name].tolist() == td[name].tolist()[::-1]
        else:
            assert_same(back[name], td[torch.arange(23, -1, -1)][name])


def test_partial_field_reads_return_only_the_fields_and_rows_asked_for(kv_client, partition):
    td = trajectories(6)
    keys = [f"p{i}_0_0" for i in range(6)]
    kv_client.kv_batch_put(keys, partition, fields=td)
    part = kv_client.kv_batch_get(keys[2:4], partition, select_fields=["responses"])
    assert list(part.keys()) == ["responses"] and part.batch_size == torch.Size([2])
    assert_same(part["responses"], td[2:4]["responses"])
    scattered = kv_client.kv_batch_get([keys[5], keys[0], keys[3]], partition, select_fields=["rm_scores"])
    assert torch.equal(scattered["rm_scores"], td["rm_scores"][[5, 0, 3]])


def test_right_padded_fields_come_back_dense_and_rows_of_several_puts_join_as_jagged(kv_client, partition):
    # Padded batches (as the trainer builds them) stay dense; puts of different widths read together
    # come back as one jagged field, each row as long as it was written.
    input_ids = torch.tensor([[5, 6, 0, 0], [7, 8, 9, 0]])
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]])
    kv_client.kv_batch_put(
        ["a", "b"], partition, fields=TensorDict({"input_ids": input_ids, "attention_mask": mask}, [2])
    )
    back = kv_client.kv_batch_get(["a", "b"], partition)
    assert not back["input_ids"].is_nested and torch.equal(back["input_ids"], input_ids)
    assert torch.equal(back["attention_mask"], mask)
    kv_client.kv_batch_put(
        ["c"],
        partition,
        fields=TensorDict(
            {"input_ids": torch.tensor([[1, 2]]), "attention_mask": torch.ones(1, 2, dtype=torch.int64)}, [1]
        ),
    )
    mixed = kv_client.kv_batch_get(["c", "a"], partition, select_fields=["input_ids"])
    assert mixed["input_ids"].is_nested
    assert [r.tolist() for r in mixed["input_ids"].unbind()] == [[1, 2], [5, 6, 0, 0]]


def test_tag_only_puts_merge_into_existing_tags_without_touching_fields(kv_client, partition):
    keys = ["t_0_0", "t_1_0"]
    kv_client.kv_batch_put(keys, partition, fields=trajectories(2), tags=[{"status": "running"}] * 2)
    meta = kv_client.kv_batch_put(
        keys, partition, tags=[{"status": "success", "score": 1.0}, {"status": "failure"}]
    )
    assert meta.tags == [{"status": "success", "score": 1.0}, {"status": "failure"}]
    assert kv_client.kv_list(partition)[partition] == dict(zip(keys, meta.tags))
    assert kv_client.kv_batch_get(keys, partition, select_fields=["rm_scores"]).batch_size == torch.Size([2])


def test_a_put_can_create_keys_with_tags_only(kv_client, partition):
    meta = kv_client.kv_batch_put(
        ["g1", "g2"], partition, tags=[{"status": "pending"}, {"status": "pending"}]
    )
    assert meta.fields == [] and kv_client.kv_list()[partition] == {
        "g1": {"status": "pending"},
        "g2": {"status": "pending"},
    }
    assert kv_client.kv_field_names(partition) == {partition: {"g1": [], "g2": []}}


def test_writing_a_new_field_adds_it_and_rewriting_a_field_replaces_it(kv_client, partition):
    keys = ["f_0_0", "f_1_0", "f_2_0"]
    td = trajectories(3)
    kv_client.kv_batch_put(keys, partition, fields=td.select("responses"))
    old_log_probs = to_jagged([torch.full((int(k),), 0.5) for k in td["responses"].offsets().diff()])
    new = TensorDict({"old_log_probs": old_log_probs}, [3])[:2]
    meta = kv_client.kv_batch_put(keys[:2], partition, fields=new)
    assert meta.fields == ["responses", "old_log_probs"]
    kv_client.kv_batch_put(
        keys[:1], partition, fields=TensorDict({"responses": to_jagged([torch.tensor([9])])}, [1])
    )
    back = kv_client.kv_batch_get(keys[:2], partition)
    assert back["responses"][0].tolist() == [9] and torch.equal(back["responses"][1], td["responses"][1])
    assert torch.equal(back["old_log_probs"].values(), new["old_log_probs"].values())


def test_kv_clear_removes_keys_and_stats_account_bytes_per_partition_and_client(kv_client, partition):
    ids = torch.zeros(4, 8, dtype=torch.int64)  # 64 bytes per row
    kv_client.kv_batch_put([f"s{i}" for i in range(4)], partition, fields=TensorDict({"ids": ids}, [4]))
    before = kv_client.stats()
    assert before["partitions"][partition] == {"keys": 4, "bytes": 256}
    read_before = kv_client.bytes_read
    kv_client.kv_batch_get(["s0", "s1"], partition)
    io = kv_client.stats()["io"]["test-driver"]
    assert io["bytes_read"] - before["io"]["test-driver"]["bytes_read"] == 128
    assert kv_client.bytes_read - read_before == 128  # the client's own count agrees with the store's
    assert kv_client.kv_clear(["s0", "s1", "missing"], partition) == 2
    assert kv_client.stats()["partitions"][partition] == {"keys": 2, "bytes": 128}


def test_kv_list_without_partition_lists_every_partition(kv_client, partition):
    kv_client.kv_batch_put(["a"], partition, tags=[{"x": 1}])
    kv_client.kv_batch_put(["a"], partition + "-val", tags=[{"x": 2}])
    listing = kv_client.kv_list()
    assert listing[partition] == {"a": {"x": 1}} and listing[partition + "-val"] == {"a": {"x": 2}}
    kv_client.kv_clear(None, partition + "-val")
    assert partition + "-val" not in kv_client.kv_list()


def test_any_string_is_a_key_including_unicode_and_nul(kv_client, partition):
    keys = ["plain_0_0", "ünï_cødé_0_1", "with\0nul_0_0", "tab\there_0_0"]
    td = TensorDict({"x": torch.arange(4)}, batch_size=[4])
    kv_client.kv_batch_put(keys, partition, fields=td)
    assert kv_client.kv_batch_get(keys[::-1], partition)["x"].tolist() == [3, 2, 1, 0]
    plain = [k for k in keys if "\0" not in k]
    assert kv_client.kv_batch_get(plain, partition)["x"].tolist() == [0, 1, 3]
    assert set(kv_client.kv_list(partition)[partition]) == set(keys)
    assert kv_client.kv_clear(keys, partition) == 4


def test_a_key_list_read_again_after_some_keys_were_cleared_and_slots_reused_sees_the_change(
    kv_client, partition
):
    # A cleared key's slot is reused by the next new key; the old key must not read its row.
    keys = ["a_0_0", "b_0_0", "c_0_0"]
    kv_client.kv_batch_put(keys, partition, fields=TensorDict({"x": torch.tensor([1, 2, 3])}, [3]))
    assert kv_client.kv_batch_get(keys, partition)["x"].tolist() == [1, 2, 3]
    kv_client.kv_clear(["b_0_0"], partition)
    kv_client.kv_batch_put(["d_0_0"], partition, fields=TensorDict({"x": torch.tensor([99])}, [1]))
    with pytest.raises(KVKeyError, match="b_0_0"):
        kv_client.kv_batch_get(keys, partition)
    kv_client.kv_batch_put(["b_0_0"], partition, fields=TensorDict({"x": torch.tensor([7])}, [1]))
    assert kv_client.kv_batch_get(keys, partition)["x"].tolist() == [1, 7, 3]
    assert kv_client.kv_batch_get(["d_0_0"], partition)["x"].tolist() == [99]


def test_a_new_key_in_a_cleared_keys_slot_starts_untagged_and_a_mixed_put_merges_into_old_tags(
    kv_client, partition
):
    kv_client.kv_batch_put(["a", "b"], partition, tags=[{"status": "done", "score": 1.0}, {"status": "done"}])
    kv_client.kv_clear(["a"], partition)
    meta = kv_client.kv_batch_put(  # "b" exists; "c" takes the slot "a" left; "d" is new
        ["b", "c", "d"],
        partition,
        fields=TensorDict({"x": torch.arange(3)}, [3]),
        tags=[{"score": 2.0}, {"status": "new"}, {}],
    )
    assert meta.tags == [{"status": "done", "score": 2.0}, {"status": "new"}, {}]
    assert kv_client.kv_list(partition)[partition] == dict(zip(["b", "c", "d"], meta.tags))
    assert kv_client.kv_batch_get(["d", "b", "c"], partition)["x"].tolist() == [2, 0, 1]
