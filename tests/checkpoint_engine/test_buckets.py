"""Bucketing and the in-process and object-store weight-sync backends."""

import pytest
import torch

from verl_lite.checkpoint_engine import (
    NaiveCheckpointEngine,
    RayCheckpointEngine,
    buckets,
    get_checkpoint_engine,
)


def named(n=5, size=256):
    torch.manual_seed(0)
    return [(f"w{i}", torch.randn(size)) for i in range(n)]  # 1 KB each


def test_buckets_group_tensors_up_to_the_byte_budget_and_keep_order():
    groups = list(buckets(named(), bucket_bytes=2048))
    assert [[name for name, _ in group] for group in groups] == [["w0", "w1"], ["w2", "w3"], ["w4"]]


def test_a_tensor_larger_than_the_budget_travels_alone():
    groups = list(buckets([("big", torch.zeros(1000)), ("small", torch.zeros(1))], bucket_bytes=100))
    assert [[name for name, _ in group] for group in groups] == [["big"], ["small"]]


def test_naive_engine_hands_over_the_same_tensors():
    engine = NaiveCheckpointEngine(bucket_megabytes=1)
    pairs = named()
    received = list(engine.receive_weights(engine.send_weights(iter(pairs), 1), 1))
    assert [n for n, _ in received] == [n for n, _ in pairs]
    assert all(got is sent for (_, got), (_, sent) in zip(received, pairs))  # in place: no copy


def test_ray_engine_round_trips_through_the_object_store(ray_local):
    engine = RayCheckpointEngine(bucket_megabytes=1)
    pairs = named() + [("bf16", torch.randn(8).to(torch.bfloat16))]
    received = dict(engine.receive_weights(engine.send_weights(iter(pairs), 3), 3))
    assert all(torch.equal(received[name], tensor) for name, tensor in pairs)


def test_unknown_backend_lists_known_ones():
    with pytest.raises(KeyError, match="unknown checkpoint engine 'gloo'; known: naive, nccl, ray"):
        get_checkpoint_engine("gloo")
