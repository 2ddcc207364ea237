"""Device, backend and attention choices of the training engine, played on CPU with what Ray would set."""

import socket

import pytest
import torch

from verl_lite.workers.engine import base
from verl_lite.workers.engine.device import (
    GPU_BACKEND,
    backend_uses_cuda,
    cuda_device_index,
    process_group_backend,
)
from verl_lite.workers.engine.varlen_attention import VARLEN_SDPA, packed_attention_implementation


@pytest.mark.parametrize(
    "gpu_ids,visible,local_rank,expected",
    [
        (["3"], "3", 1, 0),  # a one-GPU actor sees only its GPU, as device 0, whatever its bundle
        ([2], "2", 0, 0),  # Ray may return ints
        (["5"], "4,5", 1, 1),  # two visible (a two-GPU actor or a user's list): the assigned one
        (["GPU-ab"], "GPU-cd,GPU-ab", 0, 1),  # UUIDs name devices too
        (["2"], None, 0, 2),  # RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES: every device visible
        ([], None, 3, 3),  # no Ray GPU (torchrun): one process per local device
    ],
)
def test_cuda_device_is_the_one_ray_assigned(gpu_ids, visible, local_rank, expected):
    assert cuda_device_index(gpu_ids, visible, local_rank) == expected


def test_a_gpu_missing_from_the_visible_list_is_refused_naming_both():
    with pytest.raises(RuntimeError, match="GPU 3 .* CUDA_VISIBLE_DEVICES='0,1'"):
        cuda_device_index(["3"], "0,1", 0)


def test_init_distributed_on_rank_one_of_a_ray_gpu_group_picks_its_visible_device(monkeypatch):
    # What Ray sets in the second actor of a 2-GPU group: LOCAL_RANK 1 (its bundle), one visible GPU.
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("MASTER_PORT", "12345")
    monkeypatch.setattr(base, "_ray_gpu_ids", lambda: ["1"])
    calls = {}
    monkeypatch.setattr(base.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(base.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(base.torch.cuda, "set_device", lambda index: calls.setdefault("device", index))
    monkeypatch.setattr(
        base.dist, "init_process_group", lambda backend, init_method: calls.setdefault("pg", backend)
    )
    base.init_distributed("auto")
    # device 1 does not exist in a process that sees one GPU (the old LOCAL_RANK choice)
    assert calls == {"device": 0, "pg": GPU_BACKEND}


@pytest.mark.parametrize(
    "requested,cuda,expected",
    [
        ("auto", False, "gloo"),
        ("auto", True, GPU_BACKEND),  # CPU tensors (token counts, offloaded shards) need gloo beside nccl
        ("nccl", True, GPU_BACKEND),
        ("gloo", True, "gloo"),
    ],
)
def test_process_group_backend(requested, cuda, expected):
    assert process_group_backend(requested, cuda) == expected
    # the engine trains on the GPU exactly when the group has nccl (dist.get_backend returns this string)
    assert backend_uses_cuda(expected) is (expected != "gloo")


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="engine.backend='mpi'"):
        process_group_backend("mpi", True)


@pytest.mark.parametrize(
    "device,dtype,flash,expected",
    [
        ("cuda", torch.bfloat16, True, "flash_attention_2"),
        ("cuda", torch.float32, True, VARLEN_SDPA),  # flash-attn kernels take fp16/bf16 only
        ("cuda", torch.bfloat16, False, VARLEN_SDPA),  # not installed (or not importable)
        ("cpu", torch.float32, True, VARLEN_SDPA),
    ],
)
def test_packed_attention_falls_back_to_varlen_sdpa(device, dtype, flash, expected):
    assert packed_attention_implementation(torch.device(device), dtype, flash) == expected


def test_packed_attention_on_this_machine_without_flash_attn_is_varlen_sdpa():
    assert packed_attention_implementation(torch.device("cpu"), torch.float32) == VARLEN_SDPA


def test_a_one_process_group_needs_no_port(monkeypatch):
    # a port probed free by the worker group can be taken by another process before rank 0 binds it
    # (EADDRINUSE seen under a parallel suite); one process rendezvouses in memory instead
    taken = socket.socket()
    taken.bind(("", 0))
    taken.listen()
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(taken.getsockname()[1]))  # taken meanwhile by another process
    monkeypatch.setattr(base.torch.cuda, "is_available", lambda: False)
    assert not base.dist.is_initialized()
    try:
        base.init_distributed("auto")
        assert base.dist.get_world_size() == 1 and base.dist.get_backend() == "gloo"
    finally:
        if base.dist.is_initialized():
            base.dist.destroy_process_group()
        taken.close()
