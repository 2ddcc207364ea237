"""Routing around dead rollout servers: real Ray actors SIGKILLed under a request, no model needed."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
import ray

from verl_lite.workers.agent_loop.servers import LeastLoadedServers, NoRolloutServerLeft, StickyClient
from verl_lite.workers.config import SamplingConfig
from verl_lite.workers.rollout.client import GenerateRequest, RolloutClient, serve_requests
from verl_lite.workers.rollout.server import TokenOutput


class EchoServer:
    """Answers a request with its id (one token per character); an id "<...>-die-<...>" makes it SIGKILL
    itself first.

    It speaks the rollout worker's ``generate`` protocol (a list of requests, replies streamed).
    """

    def __init__(self, marker: str):
        self.marker = marker

    async def generate(self, requests: list[GenerateRequest]):
        async def one(request: GenerateRequest):
            if "-die-" in request.request_id and not os.path.exists(self.marker):
                open(self.marker, "w").close()  # only the first incarnation dies
                os.kill(os.getpid(), signal.SIGKILL)
            ids = [ord(c) for c in request.request_id]
            return TokenOutput(ids, [0.0] * len(ids), "stop", 0)

        async for finished in serve_requests(one, requests):
            yield finished

    def load(self) -> int:
        return 0


@pytest.fixture
def servers(ray_local, tmp_path):
    """``servers(count, max_restarts)``: a pool of ``count`` echo servers (killed after the test)."""
    actors = []

    def make(count: int, max_restarts: int = 0) -> LeastLoadedServers:
        remote = ray.remote(num_cpus=0, max_restarts=max_restarts, max_task_retries=0)(EchoServer)
        actors.extend(remote.remote(str(tmp_path / "died")) for _ in range(count))
        return LeastLoadedServers([RolloutClient(a.generate) for a in actors], [a.load for a in actors])

    yield make
    for actor in actors:
        ray.kill(actor)


async def ask(pool: LeastLoadedServers, prefix: str) -> str:
    """The id of the request that reached a server, for a trajectory ``prefix``'s first turn."""
    out = await StickyClient(pool, prefix).generate([1, 2], SamplingConfig(), 64)
    return "".join(map(chr, out.token_ids))


def test_a_request_whose_server_died_is_resent_to_the_live_one_with_its_id(servers):
    async def scenario():
        pool = servers(2)  # the first request goes to server 0 (ties: the lowest index)
        request_id = await ask(pool, "traj-die")
        assert request_id == "traj-die-0" and pool.retried == 1
        for _ in range(40):  # the watcher finds server 0 gone for good (max_restarts=0)
            if pool.dead:
                break
            await asyncio.sleep(0.25)
        assert pool.live == {1} and pool.dead == {0}
        with pytest.raises(ray.exceptions.ActorDiedError):
            await pool.probes[0].remote()

    asyncio.run(scenario())


def test_a_request_waits_for_the_restarted_server_when_it_was_the_only_one(servers):
    async def scenario():
        pool = servers(1, max_restarts=1)
        request_id = await ask(pool, "traj-die")
        return pool, request_id

    pool, request_id = asyncio.run(scenario())
    assert request_id == "traj-die-0" and pool.retried == 1 and pool.live == {0}


def test_with_every_server_gone_the_request_raises_naming_the_cause(servers):
    async def scenario():
        pool = servers(1)
        pool.death_note = " and rollout.max_restarts=0 restarts were used up"
        await ask(pool, "traj-die")

    with pytest.raises(
        NoRolloutServerLeft, match="server 0 died and cannot be restarted and rollout.max_restarts=0"
    ):
        asyncio.run(scenario())
