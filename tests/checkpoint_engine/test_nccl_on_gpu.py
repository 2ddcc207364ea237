"""The nccl weight-sync backend: a GPU broadcast from a sender to a replica."""

import socket

import pytest
import torch
import torch.multiprocessing as mp

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        torch.cuda.device_count() < 2,
        reason="needs 2 CUDA GPUs: NCCL ranks must sit on distinct devices (this machine has "
        f"{torch.cuda.device_count()}); run on a GPU machine",
    ),
]


def _run(rank: int, port: int, results) -> None:
    from verl_lite.checkpoint_engine import NcclCheckpointEngine

    torch.cuda.set_device(rank)
    torch.manual_seed(0)
    weights = [("a", torch.randn(1000, device="cuda")), ("b", torch.randn(3, 7, device="cuda").bfloat16())]
    engine = NcclCheckpointEngine(bucket_megabytes=1, rank=0 if rank == 0 else 1)
    engine.join_group("127.0.0.1", port, rank, 2)
    handle = NcclCheckpointEngine.layout(iter(weights), engine.bucket_bytes)
    if rank == 0:
        engine.send_weights(iter(weights), 1)
    else:
        received = dict(engine.receive_weights(handle, 1))
        results[rank] = all(torch.equal(received[n].cpu(), t.cpu()) for n, t in weights)


def test_nccl_broadcast_delivers_identical_weights():
    with socket.socket() as sock:
        sock.bind(("", 0))
        port = sock.getsockname()[1]
    results = mp.Manager().dict()
    mp.spawn(_run, args=(port, results), nprocs=2, join=True)
    assert results[1] is True
