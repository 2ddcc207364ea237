"""Store lifecycle: config in, named index actors found from anywhere in the job, clean shutdown and restart."""

from pathlib import Path

import pytest
import ray
import torch
from omegaconf import OmegaConf
from tensordict import TensorDict

from verl_lite.kv import KVStoreError, get_kv_client, init_kv_store, shutdown_kv_store

YAML = Path(__file__).resolve().parents[2] / "configs" / "kv" / "default.yaml"


def test_init_from_the_yaml_config_with_overrides_names_the_index_actors_and_refuses_a_second_store(
    ray_local,
):
    client = init_kv_store(OmegaConf.load(YAML), name_prefix="lifecycle", num_storage_units=3)
    try:
        assert len(client.indexes) == 3 and ray.get_actor("lifecycle_index_2") is not None
        assert get_kv_client(name_prefix="lifecycle").store_id == client.store_id
        with pytest.raises(KVStoreError, match="name_prefix 'lifecycle' is already running"):
            init_kv_store(name_prefix="lifecycle")
    finally:
        shutdown_kv_store("lifecycle")
    shutdown_kv_store("lifecycle")  # a second shutdown is a no-op
    restarted = init_kv_store(name_prefix="lifecycle", num_storage_units=1)  # names were released
    assert restarted.store_id != client.store_id and get_kv_client(name_prefix="lifecycle") is not client
    shutdown_kv_store("lifecycle")


def test_by_default_the_store_starts_one_index_actor_per_node(ray_local):
    client = init_kv_store(name_prefix="per_node")
    try:
        nodes = sum(1 for node in ray.nodes() if node["Alive"])
        assert len(client.indexes) == nodes and client.config.num_storage_units == nodes
        assert len(get_kv_client(name_prefix="per_node").indexes) == nodes
    finally:
        shutdown_kv_store("per_node")


def test_a_pickled_client_reaches_the_same_store_under_its_new_process_name(kv_client, partition):
    @ray.remote(num_cpus=0)
    def write(client, partition):
        client.kv_batch_put(["w"], partition, fields=TensorDict({"ids": torch.arange(3)[None]}, [1]))
        return client.name

    name = ray.get(write.remote(kv_client, partition))
    assert name != kv_client.name and kv_client.io_accounting()[name]["puts"] == 1
    assert kv_client.kv_batch_get(["w"], partition)["ids"].tolist() == [[0, 1, 2]]
