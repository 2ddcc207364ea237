"""Every KV store error names what is wrong: the key, the field (and those that exist), the clash, the store."""

import pytest
import ray
import torch
from tensordict import TensorDict

from verl_lite.kv import (
    KVFieldError,
    KVKeyError,
    KVSchemaError,
    KVStoreClosedError,
    get_kv_client,
    init_kv_store,
    shutdown_kv_store,
)
from verl_lite.kv.client import index_of_keys
from verl_lite.protocol import to_jagged


def test_reading_a_missing_key_names_the_key_and_partition(kv_client, partition):
    kv_client.kv_batch_put(["here"], partition, tags=[{}])
    with pytest.raises(KVKeyError, match=rf"1 key\(s\) not found in partition '{partition}': \['gone_0_0'\]"):
        kv_client.kv_batch_get(["here", "gone_0_0"], partition)


def test_reading_a_missing_field_lists_the_fields_the_key_holds(kv_client, partition):
    td = TensorDict({"responses": to_jagged([torch.tensor([1, 2])]), "rm_scores": torch.ones(1)}, [1])
    kv_client.kv_batch_put(["k_0_0"], partition, fields=td)
    with pytest.raises(KVFieldError) as err:
        kv_client.kv_batch_get(["k_0_0"], partition, select_fields=["values"])
    assert str(err.value) == (
        f"kv_batch_get: field 'values' is missing for key 'k_0_0' in partition '{partition}'; "
        "the key holds ['responses', 'rm_scores']."
    )


def test_a_dtype_clash_between_rows_of_one_field_is_rejected_at_put(kv_client, partition):
    kv_client.kv_batch_put(["a"], partition, fields=TensorDict({"values": torch.zeros(1, 4)}, [1]))
    wrong = TensorDict({"values": torch.zeros(1, 4, dtype=torch.float64)}, [1])
    with pytest.raises(
        KVSchemaError, match=r"field 'values' .* holds float32 rows of shape \(L\), .* brings float64"
    ):
        kv_client.kv_batch_put(["b"], partition, fields=wrong)
    assert "b" not in kv_client.kv_list(partition)[partition]  # nothing half-written


def test_once_every_row_of_a_field_is_cleared_the_field_may_change_dtype(kv_client, partition):
    # Schemas are checked per index actor: "a", "b" and "c" hash to the same one of the fixture's two.
    assert len(set(index_of_keys(["a", "b", "c"], 2).tolist())) == 1
    kv_client.kv_batch_put(["a", "b"], partition, fields=TensorDict({"v": torch.zeros(2, 4)}, [2]))
    kv_client.kv_clear(["a"], partition)
    wrong = TensorDict({"v": torch.zeros(1, 4, dtype=torch.float64)}, [1])
    with pytest.raises(KVSchemaError, match="holds float32"):
        kv_client.kv_batch_put(["c"], partition, fields=wrong)  # "b" still holds float32 rows
    kv_client.kv_clear(None, partition)
    assert partition not in kv_client.kv_list() and partition not in kv_client.stats()["partitions"]
    kv_client.kv_batch_put(["c"], partition, fields=wrong)
    assert kv_client.kv_batch_get(["c"], partition)["v"].dtype == torch.float64
    assert list(kv_client.kv_list(partition)[partition]) == ["c"]


def test_a_trailing_shape_clash_is_rejected_but_different_lengths_are_not(kv_client, partition):
    kv_client.kv_batch_put(["a"], partition, fields=TensorDict({"h": torch.zeros(1, 3, 2)}, [1]))
    kv_client.kv_batch_put(
        ["b"], partition, fields=TensorDict({"h": torch.zeros(1, 5, 2)}, [1])
    )  # longer: fine
    with pytest.raises(
        KVSchemaError, match=r"holds float32 rows of shape \(L, 2\).*brings float32 rows of shape \(L, 4\)"
    ):
        kv_client.kv_batch_put(["c"], partition, fields=TensorDict({"h": torch.zeros(1, 3, 4)}, [1]))
    mixed = kv_client.kv_batch_get(["a", "b"], partition)
    assert mixed["h"].is_nested and mixed["h"].offsets().diff().tolist() == [3, 5]


def test_malformed_puts_say_what_does_not_line_up(kv_client, partition):
    with pytest.raises(KVSchemaError, match="got 2 keys but the fields have 3 rows"):
        kv_client.kv_batch_put(["a", "b"], partition, fields=TensorDict({"x": torch.zeros(3)}, [3]))
    with pytest.raises(KVSchemaError, match=r"duplicate keys in one call: \['a'\]"):
        kv_client.kv_batch_put(["a", "a"], partition, tags=[{}, {}])


def test_calls_after_shutdown_raise_store_closed_in_this_and_other_processes(ray_local):
    client = init_kv_store(num_storage_units=1, name_prefix="closing")
    shutdown_kv_store("closing")
    with pytest.raises(KVStoreClosedError, match="kv_batch_put: the KV store was shut down"):
        client.kv_batch_put(["a"], "train", tags=[{}])
    with pytest.raises(KVStoreClosedError, match="no KV store with name_prefix 'closing'"):
        get_kv_client(name_prefix="closing")

    @ray.remote(num_cpus=0)
    def put_from_worker(c):  # ``c`` is a copy of the client, as another process holds it
        try:
            c.kv_batch_put(["a"], "train", tags=[{}])
        except KVStoreClosedError as e:
            return str(e)

    assert "index actor of the KV store is gone" in ray.get(put_from_worker.remote(client))


def test_a_dtype_clash_across_index_actors_is_named_when_the_rows_are_read_together(kv_client, partition):
    from verl_lite.kv.client import index_of_keys

    candidates = [f"x{i}" for i in range(20)]
    owners = index_of_keys(candidates, 2).tolist()
    a, b = candidates[owners.index(0)], candidates[owners.index(1)]  # keys on different index actors
    kv_client.kv_batch_put([a], partition, fields=TensorDict({"v": torch.zeros(1, 2)}, [1]))
    kv_client.kv_batch_put(
        [b], partition, fields=TensorDict({"v": torch.zeros(1, 2, dtype=torch.int32)}, [1])
    )
    with pytest.raises(KVSchemaError, match=r"rows of field 'v' disagree \(float32 rows .* vs int32 rows"):
        kv_client.kv_batch_get([a, b], partition)
