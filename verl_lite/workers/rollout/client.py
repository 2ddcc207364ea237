"""``RolloutClient``: the caller's side of one rollout server, sending the requests of a moment as one call.

A step sends hundreds of requests and every Ray actor call costs submission, scheduling and a reply
(``bench/e2e_vs_trl.py --baseline`` measures it), so the requests that agent loops make in the same turn
of the event loop (all first turns of a batch start together) go to the server as one call of
``RolloutWorker.generate`` and its replies stream back as they finish: each reply carries every request
of the call that finished since the last, so a short answer never waits for a long one, and a batch that
finishes together (``hf`` decodes it as one) comes back in one message.

A request whose call fails (the server died, it raised) raises that error; the caller decides whether
to send it again. Agent loops that run in the server's own process and on its loop (the hybrid
placement) use an ``InProcessClient`` instead: a request is then just an await.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from verl_lite.workers.config import SamplingConfig
from verl_lite.workers.rollout.server import RolloutServer, TokenOutput


@dataclass(frozen=True)
class GenerateRequest:
    """One request to a rollout server: the arguments of ``RolloutServer.generate``."""

    request_id: str
    prompt_ids: list[int]
    sampling: SamplingConfig
    max_tokens: int


class RolloutClient:
    """Sends ``generate`` requests to one server's streaming ``generate`` endpoint, one call per loop turn.

    Args:
        endpoint: the server's remote ``generate`` method (``RayWorkerGroup.endpoints("generate")``).
    """

    def __init__(self, endpoint: Any):
        self.endpoint = endpoint
        self.calls = 0  # remote calls made (each carries one or more requests)
        self._pending: list[tuple[GenerateRequest, asyncio.Future]] = []
        self._senders: set[asyncio.Task] = set()  # the calls in flight (the loop keeps weak references)

    def generate(
        self, request_id: str, prompt_ids: list[int], sampling: SamplingConfig, max_tokens: int
    ) -> asyncio.Future[TokenOutput]:
        """The server's ``TokenOutput`` for one request (await it); sent with the others of this loop turn."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if not self._pending:
            loop.call_soon(self._send)
        self._pending.append((GenerateRequest(request_id, list(prompt_ids), sampling, max_tokens), future))
        return future

    def _send(self) -> None:
        pending, self._pending = self._pending, []
        pending = [(request, future) for request, future in pending if not future.cancelled()]
        if not pending:
            return
        self.calls += 1
        task = asyncio.ensure_future(self._receive(pending))
        self._senders.add(task)
        task.add_done_callback(self._senders.discard)

    async def _receive(self, pending: list[tuple[GenerateRequest, asyncio.Future]]) -> None:
        futures = [future for _, future in pending]
        try:
            stream = self.endpoint.options(num_returns="streaming").remote([r for r, _ in pending])
            async for ref in stream:
                for position, output in await ref:
                    future = futures[position]
                    if future.done():
                        continue
                    if isinstance(output, BaseException):
                        future.set_exception(output)
                    else:
                        future.set_result(output)
            missing = RuntimeError("the rollout server ended the call without answering this request.")
            for future in futures:
                if not future.done():
                    future.set_exception(missing)
        except BaseException as error:  # the call failed: every request still waiting gets its error
            for future in futures:
                if not future.done():
                    future.set_exception(error)
            if not isinstance(error, Exception):
                raise


class InProcessClient:
    """Sends ``generate`` requests straight to a server on the caller's own event loop (no Ray call).

    Args:
        server: the ``RolloutServer``; the agent loops must run on the loop that serves it.
    """

    def __init__(self, server: RolloutServer):
        self.server = server

    async def generate(
        self, request_id: str, prompt_ids: list[int], sampling: SamplingConfig, max_tokens: int
    ) -> TokenOutput:
        """The server's ``TokenOutput`` for one request."""
        return await self.server.generate(request_id, list(prompt_ids), sampling, max_tokens)


async def serve_requests(server_generate: Any, requests: list[GenerateRequest]):
    """The server side: run ``requests`` at once and yield ``[(position, TokenOutput), ...]`` as they finish.

    ``server_generate(request)`` is an awaitable ``TokenOutput`` per request. Every yield carries all the
    requests that finished since the previous one; a request that raised carries its exception instead,
    so it fails alone.
    """
    tasks = {asyncio.ensure_future(server_generate(r)): i for i, r in enumerate(requests)}
    try:
        waiting = set(tasks)
        while waiting:
            done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            yield [(tasks[task], task.exception() or task.result()) for task in done]
    finally:
        for task in tasks:
            task.cancel()


__all__ = ["GenerateRequest", "InProcessClient", "RolloutClient", "serve_requests"]
