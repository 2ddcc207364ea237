"""The units' socket channel: authentication, references handed over through Ray, failed copies,
and reference caches that never pin cleared rows."""

import socket
import threading
import time

import pytest
import ray
import torch
from tensordict import TensorDict

from tests.kv.test_memory import object_store_bytes
from verl_lite.kv import KVStoreError, get_kv_client
from verl_lite.kv.channel import UnitChannel
from verl_lite.kv.client import _Handover
from verl_lite.kv.wire import encode


def big(n: int, seed: int) -> TensorDict:
    """Over the inline size (n x 256 int64), so it is stored as one object in the object store."""
    g = torch.Generator().manual_seed(seed)
    return TensorDict({"ids": torch.randint(0, 1000, (n, 256), generator=g)}, batch_size=[n])


@ray.remote(num_cpus=0)
class Peer:
    """Another process of the job, with its own client (and its own reference cache)."""

    def put(self, keys: list[str], partition: str, seed: int) -> None:
        get_kv_client().kv_batch_put(keys, partition, fields=big(len(keys), seed))

    def read(self, keys: list[str], partition: str) -> torch.Tensor:
        return get_kv_client().kv_batch_get(keys, partition, copy=True)["ids"]

    def ping(self) -> None:
        get_kv_client().ping()


def test_a_connection_without_the_store_secret_is_refused(kv_client):
    host, port = kv_client.unit_info[0]["address"]
    with socket.create_connection((host, port), timeout=10) as conn:
        conn.recv(32)  # the challenge
        conn.sendall(b"\0" * 32)  # a wrong answer
        conn.sendall(len(encode(("ping", (), None))).to_bytes(8, "big") + encode(("ping", (), None)))
        try:
            answer = conn.recv(1)
        except ConnectionResetError:
            answer = b""
        assert answer == b""  # closed without an answer
    wrong = UnitChannel([(host, port)], secret=b"not the secret")
    with pytest.raises(KVStoreError, match="storage unit of the KV store is gone"):
        wrong.call([(0, encode(("ping", (), None)))])
    kv_client.ping()  # the unit still serves its clients


def test_rows_put_in_one_process_read_back_at_once_in_another_both_ways(kv_client, partition):
    peer = Peer.remote()
    keys = [f"x{i}_0_0" for i in range(64)]
    kv_client.kv_batch_put(keys, partition, fields=big(64, seed=1))
    # The peer has no reference yet: it asks the unit, which waits for the driver's hand-over.
    assert torch.equal(ray.get(peer.read.remote(keys, partition)), big(64, seed=1)["ids"])
    theirs = [f"y{i}_0_0" for i in range(64)]
    ray.get(peer.put.remote(theirs, partition, 2))
    assert torch.equal(kv_client.kv_batch_get(theirs, partition)["ids"], big(64, seed=2)["ids"])
    ray.kill(peer)


def test_a_put_whose_copy_fails_raises_and_its_rows_fail_to_read_instead_of_hanging(kv_client, partition):
    td = big(64, seed=3)
    td["lock"] = [threading.Lock() for _ in range(64)]  # python values that cannot be pickled
    keys = [f"f{i}_0_0" for i in range(64)]
    with pytest.raises(TypeError, match="lock"):
        kv_client.kv_batch_put(keys, partition, fields=td)
    start = time.monotonic()
    with pytest.raises(KVStoreError, match="the put that wrote these rows failed"):
        ray.get(Peer.remote().read.remote(keys, partition))
    assert time.monotonic() - start < 30


def test_a_readers_cached_reference_does_not_keep_cleared_rows_in_the_object_store(kv_client, partition):
    peer = Peer.remote()
    ray.get(peer.ping.remote())
    baseline = object_store_bytes()
    keys = [f"c{i}_0_0" for i in range(2048)]  # 4 MB
    kv_client.kv_batch_put(keys, partition, fields=big(2048, seed=4))
    assert ray.get(peer.read.remote(keys, partition)).shape == (2048, 256)  # the peer caches it now
    kv_client.kv_clear(keys, partition)
    ray.get(peer.ping.remote())  # the unit's reply tells the peer the object is gone
    deadline = time.monotonic() + 20
    while object_store_bytes() > baseline + 1024**2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert object_store_bytes() <= baseline + 1024**2
    ray.kill(peer)


@ray.remote(num_cpus=0)
class HoldRecorder:
    """Stands in for a unit's ``hold`` (a real actor): records which tokens were handed over."""

    def __init__(self):
        self.calls = []

    def hold(self, items: list) -> None:
        self.calls.append([token for token, _ in items])

    def held(self) -> list:
        """The tokens of each hand-over call, one list per call."""
        return self.calls


def test_hand_overs_go_out_in_one_batch_per_unit_and_skip_objects_already_dropped(ray_local):
    recorder = HoldRecorder.remote()
    # The batch leaves interval_s after the first send. The sends and drops below take microseconds;
    # the interval is far longer than a loaded machine pauses a thread, so nothing splits the batch.
    interval_s = 0.5
    handover = _Handover(interval_s=interval_s)
    refs = {token: ray.put(token) for token in (b"kept-1", b"dropped", b"kept-2")}
    for token, ref in refs.items():
        handover.send(recorder, ("store", 0), token, ref)
    handover.dropped(("store", 0), [b"dropped"])  # reported by the unit before the batch left
    handover.dropped(("store", 1), [b"kept-2"])  # another unit's drop does not count here
    deadline = time.monotonic() + 10 + interval_s
    while not ray.get(recorder.held.remote()) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(2 * interval_s)  # a second batch would have left by now
    assert ray.get(recorder.held.remote()) == [[b"kept-1", b"kept-2"]]
