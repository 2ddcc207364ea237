"""Runs one rollout server on a background event-loop thread, so sync code can await its coroutines."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from verl_lite.workers.rollout.server import RolloutServer

T = TypeVar("T")


class ServerHost:
    """An asyncio loop in a daemon thread that owns one :class:`RolloutServer`.

    Pass the server, or better a zero-argument factory: the factory runs on the loop thread, so the
    server's async resources (vLLM's ``AsyncLLM`` and its output handler) are created on the loop that
    serves them. ``call`` may be used from any number of threads at once, except the loop thread itself;
    a thread waiting in ``call`` runs the server's blocking model work meanwhile (``executor``, a
    :class:`WaitingThreadExecutor` the host gives the server).

    Example::

        host = ServerHost(lambda: get_rollout("vllm")(path, config, eos_token_id, pad_token_id))
        out = host.call(host.server.generate("r0", [3, 4, 5], sampling, max_tokens=16))
        host.shutdown()
    """

    def __init__(self, server: RolloutServer | Callable[[], RolloutServer]):
        self.executor = WaitingThreadExecutor()
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
        self.server.executor = self.executor

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop and return at once; ``.result()`` on the future blocks for it."""
        if self._loop.is_closed():
            coro.close()
            raise RuntimeError("ServerHost was shut down; start a new one to serve again.")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and block until it returns (or raise what it raised).

        While it waits, the calling thread runs the server's blocking model work (see
        :class:`WaitingThreadExecutor`). After ``timeout`` seconds it raises ``TimeoutError``; the
        coroutine keeps running on the loop.
        """
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError(
                "ServerHost.call from the loop thread would deadlock; await the coroutine there."
            )
        return self.executor.wait(self.submit(coro), timeout)

    def shutdown(self) -> None:
        """Shut the server down on its loop (engine processes end), cancel what is left and stop the thread."""
        if self._loop.is_closed():
            return
        try:
            self.call(_shutdown(self.server))
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        # on the loop's own thread: the caller may be running an event loop of its own (an async actor's)
        asyncio.run_coroutine_threadsafe(self._loop.shutdown_default_executor(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self.executor.shutdown()


class WaitingThreadExecutor(concurrent.futures.Executor):
    """Runs a server's blocking model work on a thread that waits in :meth:`wait`, else on one of its own.

    Why: torch's CPU kernels run on OpenMP, and libgomp keeps a team of threads per thread that calls
    into it. Once a process holds more such threads than it has cores, every team throttles its
    spin-wait between parallel regions, and each small op then pays a sleep and a wake-up
    (``bench/omp_threads.py``). In the hybrid placement the thread that waits on the host is the one
    Ray runs the colocated worker's methods on, the one that trains, so generation runs where training
    does. With no thread waiting (requests from other processes, the standalone placement) the work
    runs on this executor's own thread, always the same one.
    """

    def __init__(self) -> None:
        self._own = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollout-compute")
        self._changed = threading.Condition()
        self._queue: deque[tuple[concurrent.futures.Future, Callable, tuple, dict]] = deque()
        self._waiting = 0  # threads inside wait(), taking work from _queue

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        with self._changed:
            if self._waiting:
                future: concurrent.futures.Future[T] = concurrent.futures.Future()
                self._queue.append((future, fn, args, kwargs))
                self._changed.notify()
                return future
        return self._own.submit(fn, *args, **kwargs)

    def wait(self, future: concurrent.futures.Future[T], timeout: float | None = None) -> T:
        """Block until ``future`` is done and return its result, running submitted work meanwhile."""
        deadline = None if timeout is None else time.monotonic() + timeout
        future.add_done_callback(self._wake)
        with self._changed:
            self._waiting += 1
        try:
            while True:
                with self._changed:
                    while not self._queue and not future.done():
                        left = None if deadline is None else deadline - time.monotonic()
                        if left is not None and left <= 0:
                            raise TimeoutError(f"no result within {timeout} s")
                        self._changed.wait(left)
                    if future.done():
                        break
                    work = self._queue.popleft()
                _run(*work)
        finally:
            with self._changed:
                self._waiting -= 1
                if not self._waiting:  # nobody takes queued work any more: hand it to the own thread
                    while self._queue:
                        self._own.submit(_run, *self._queue.popleft())
        return future.result()

    def _wake(self, _: concurrent.futures.Future) -> None:
        with self._changed:
            self._changed.notify_all()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._own.shutdown(wait=wait, cancel_futures=cancel_futures)


def _run(future: concurrent.futures.Future, fn: Callable, args: tuple, kwargs: dict) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args, **kwargs)
    except BaseException as error:  # noqa: BLE001 - handed to whoever awaits the future
        future.set_exception(error)
    else:
        future.set_result(result)


async def _build(factory: Callable[[], RolloutServer]) -> RolloutServer:
    return factory()


async def _shutdown(server: RolloutServer) -> None:
    server.shutdown()
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
