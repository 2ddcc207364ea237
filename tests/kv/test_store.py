"""Store lifecycle: config in, named index actors found from anywhere in the job, clean shutdown and restart."""

import gc
import threading
import time
from pathlib import Path

import pytest
import ray
import torch
from omegaconf import OmegaConf
from ray.util import list_named_actors
from tensordict import TensorDict

from verl_lite.kv import KVStoreClosedError, KVStoreError, get_kv_client, init_kv_store, shutdown_kv_store

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


def test_a_kept_store_serves_the_next_store_of_its_config_empty_and_ends_when_none_takes_it(ray_local):
    def actor_ids(n: int) -> list:
        return [ray.get_actor(f"kept_index_{i}")._actor_id for i in range(n)]

    first = init_kv_store(name_prefix="kept", num_storage_units=2)
    first.kv_batch_put(["a", "b"], "train", fields=TensorDict({"x": torch.ones(2, 3)}, [2]), tags=[{}, {}])
    started = actor_ids(2)
    shutdown_kv_store("kept", keep_s=60)
    with pytest.raises(KVStoreClosedError, match="kv_batch_put: the KV store was shut down"):
        first.kv_batch_put(["c"], "train", tags=[{}])
    first_id = first.store_id
    del first  # the handles it started the actors with: the kept store outlives them
    gc.collect()
    time.sleep(0.5)
    second = init_kv_store(name_prefix="kept", num_storage_units=2)
    assert actor_ids(2) == started and second.store_id != first_id
    assert get_kv_client(name_prefix="kept").store_id == second.store_id
    stats = second.stats()
    assert (stats["partitions"], stats["objects"], stats["io"]) == ({}, 0, {})
    shutdown_kv_store("kept", keep_s=60)
    third = init_kv_store(name_prefix="kept", num_storage_units=1)  # another config: new index actors
    assert len(third.indexes) == 1 and actor_ids(1) != started[:1]
    with pytest.raises(ValueError):
        ray.get_actor("kept_index_1")
    shutdown_kv_store("kept", keep_s=0.5)  # not taken: ended then
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "kept_index_0" in list_named_actors():
        time.sleep(0.1)
    with pytest.raises(KVStoreClosedError, match="no KV store with name_prefix 'kept'"):
        get_kv_client(name_prefix="kept")


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
    assert name != kv_client.name and kv_client.stats()["io"][name]["puts"] == 1
    assert kv_client.kv_batch_get(["w"], partition)["ids"].tolist() == [[0, 1, 2]]


def test_a_store_one_process_keeps_is_ended_by_another_that_starts_its_own(ray_local, monkeypatch):
    thread_errors = []
    monkeypatch.setattr(threading, "excepthook", thread_errors.append)
    init_kv_store(name_prefix="handover", num_storage_units=1)
    kept = ray.get_actor("handover_index_0")._actor_id
    shutdown_kv_store("handover", keep_s=3.0)
    timer_done = time.monotonic() + 4.0

    @ray.remote(num_cpus=0)
    def start_own() -> bytes:
        init_kv_store(name_prefix="handover", num_storage_units=1)  # kept by another process: ended
        return ray.get_actor("handover_index_0")._actor_id.binary()

    try:
        theirs = ray.get(start_own.remote())
        assert theirs != kept.binary()
        time.sleep(max(0.0, timer_done - time.monotonic()))  # this process's timer finds its store gone
        # and leaves the other one running
        assert ray.get_actor("handover_index_0")._actor_id.binary() == theirs
        assert thread_errors == []
    finally:
        shutdown_kv_store("handover")
