"""Runs one rollout server on a background event-loop thread, so sync code can await its coroutines."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from verl_lite.workers.rollout.server import RolloutServer

T = TypeVar("T")


class ServerHost:
    """An asyncio loop in a daemon thread that owns one :class:`RolloutServer`.

    Pass the server, or better a zero-argument factory: the factory runs on the loop thread, so the
    server's async resources (vLLM's ``AsyncLLM`` and its output handler) are created on the loop that
    serves them. ``call`` may be used from any number of threads at once, except the loop thread itself.

    Example::

        host = ServerHost(lambda: get_rollout("vllm")(path, config, eos_token_id, pad_token_id))
        out = host.call(host.server.generate("r0", [3, 4, 5], sampling, max_tokens=16))
        host.shutdown()
    """

    def __init__(self, server: RolloutServer | Callable[[], RolloutServer]):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="rollout-server-loop", daemon=True
        )
        self._thread.start()
        if isinstance(server, RolloutServer):
            self.server = server
        else:
            try:
                self.server = self.call(_build(server))
            except BaseException:
                self._stop_loop()
                raise

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop and return at once; ``.result()`` on the future blocks for it."""
        if self._loop.is_closed():
            coro.close()
            raise RuntimeError("ServerHost was shut down; start a new one to serve again.")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and block until it returns (or raise what it raised).

        After ``timeout`` seconds it raises ``TimeoutError``; the coroutine keeps running on the loop.
        """
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError(
                "ServerHost.call from the loop thread would deadlock; await the coroutine there."
            )
        return self.submit(coro).result(timeout)

    def shutdown(self) -> None:
        """Shut the server down on its loop (engine processes end), cancel what is left and stop the thread."""
        if self._loop.is_closed():
            return
        try:
            self.call(_shutdown(self.server))
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.run_until_complete(self._loop.shutdown_default_executor())
        self._loop.close()


async def _build(factory: Callable[[], RolloutServer]) -> RolloutServer:
    return factory()


async def _shutdown(server: RolloutServer) -> None:
    server.shutdown()
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
