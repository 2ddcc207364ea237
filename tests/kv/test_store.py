"""Store lifecycle: config in, named units found from anywhere in the job, clean shutdown and restart."""

import copy
from pathlib import Path

import pytest
import ray
import torch
from omegaconf import OmegaConf
from tensordict import TensorDict

from verl_lite.kv import KVStoreError, get_kv_client, init_kv_store, shutdown_kv_store
from verl_lite.protocol import to_jagged

YAML = Path(__file__).resolve().parents[2] / "configs" / "kv" / "default.yaml"


def test_init_from_the_yaml_config_with_overrides_names_the_units_and_refuses_a_second_store(ray_local):
    client = init_kv_store(OmegaConf.load(YAML), name_prefix="lifecycle", num_storage_units=3)
    try:
        assert len(client.units) == 3 and ray.get_actor("lifecycle_unit_2") is not None
        assert get_kv_client(name_prefix="lifecycle").store_id == client.store_id
        with pytest.raises(KVStoreError, match="name_prefix 'lifecycle' is already running"):
            init_kv_store(name_prefix="lifecycle")
    finally:
        shutdown_kv_store("lifecycle")
    shutdown_kv_store("lifecycle")  # a second shutdown is a no-op
    restarted = init_kv_store(name_prefix="lifecycle", num_storage_units=1)  # names were released
    assert restarted.store_id != client.store_id and get_kv_client(name_prefix="lifecycle") is not client
    shutdown_kv_store("lifecycle")


def test_by_default_the_store_starts_one_unit_per_node(ray_local):
    client = init_kv_store(name_prefix="per_node")
    try:
        nodes = sum(1 for node in ray.nodes() if node["Alive"])
        assert len(client.units) == nodes and client.config.num_storage_units == nodes
        assert len(get_kv_client(name_prefix="per_node").units) == nodes
    finally:
        shutdown_kv_store("per_node")


def test_a_client_on_another_node_sends_each_unit_its_rows_and_reads_rows_by_value(kv_client, partition):
    remote = copy.copy(kv_client)
    remote._node_id = "another-node"  # no shared batch, no shared chunks: rows travel by value
    ids = torch.arange(200 * 64).view(200, 64)  # 100 KB: large enough to go through the object store
    td = TensorDict({"ids": ids, "responses": to_jagged([torch.arange(k % 7) for k in range(200)])}, [200])
    keys = [f"n{i}_0_0" for i in range(200)]
    remote.kv_batch_put(keys, partition, fields=td)
    back = remote.kv_batch_get([keys[150], keys[3]], partition)
    assert torch.equal(back["ids"], ids[[150, 3]])
    assert [r.tolist() for r in back["responses"].unbind()] == [list(range(150 % 7)), list(range(3))]
    assert torch.equal(kv_client.kv_batch_get(keys, partition)["ids"], ids)  # same data for local readers
