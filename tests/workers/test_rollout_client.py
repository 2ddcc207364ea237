"""``RolloutClient``: the requests of one event-loop turn travel as one Ray call, replies stream back.

The server side is a real Ray actor speaking the rollout worker's ``generate`` protocol
(``serve_requests``) with requests that take as long as their ``max_tokens`` says, in hundredths of a
second; what is checked is the transport: how many calls, which reply arrives when, and errors.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import ray

from verl_lite.workers.config import SamplingConfig
from verl_lite.workers.rollout.client import GenerateRequest, RolloutClient, serve_requests
from verl_lite.workers.rollout.server import TokenOutput


class TimedServer:
    """Answers after ``max_tokens`` / 100 seconds; a negative ``max_tokens`` raises; counts its calls."""

    def __init__(self):
        self.calls = []

    async def generate(self, requests: list[GenerateRequest]):
        self.calls.append([r.request_id for r in requests])

        async def one(request: GenerateRequest) -> TokenOutput:
            if request.max_tokens < 0:
                raise ValueError(f"bad request {request.request_id}")
            await asyncio.sleep(request.max_tokens / 100)
            return TokenOutput(list(request.prompt_ids), [0.0], "stop", 0)

        async for finished in serve_requests(one, requests):
            yield finished

    def received(self) -> list[list[str]]:
        return self.calls


@pytest.fixture
def server(ray_local):
    actor = ray.remote(num_cpus=0)(TimedServer).remote()
    yield actor
    ray.kill(actor)


def test_requests_of_one_turn_go_as_one_call_and_each_reply_arrives_when_it_is_done(server):
    sampling = SamplingConfig()

    async def scenario():
        client = RolloutClient(server.generate)
        short = client.generate("short", [1], sampling, 5)
        long = client.generate("long", [2, 3], sampling, 150)
        first = await short
        short_done = time.perf_counter()
        assert not long.done()  # the short reply did not wait for the long one
        second = await long
        gap_s = time.perf_counter() - short_done
        late = client.generate("late", [4], sampling, 1)  # a later turn: a call of its own
        await late
        return client.calls, first, second, gap_s

    calls, first, second, gap_s = asyncio.run(scenario())
    assert calls == 2 and ray.get(server.received.remote()) == [["short", "long"], ["late"]]
    assert first.token_ids == [1] and second.token_ids == [2, 3]
    # the two ran side by side: the long one ended about 1.5 - 0.05 s after the short one's reply
    assert gap_s > 1.0


def test_a_request_that_raises_fails_alone(server):
    sampling = SamplingConfig()

    async def scenario():
        client = RolloutClient(server.generate)
        bad = client.generate("bad", [1], sampling, -1)
        good = client.generate("good", [2], sampling, 1)
        with pytest.raises(ValueError, match="bad request bad"):
            await bad
        return await good

    assert asyncio.run(scenario()).token_ids == [2]
