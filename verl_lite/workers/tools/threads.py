"""``ToolThreads``: the threads a tool's synchronous code runs on, bounded and apart from everything else.

A synchronous tool cannot be interrupted: when a call outlives ``multi_turn.tool_timeout_s`` the agent loop
stops waiting, but the thread keeps running. On a shared pool (``asyncio.to_thread``'s default executor)
such threads would pile up until the agent-loop worker's own work (reading rows, scoring, storing) or the
rollout server's could no longer get a thread. So each tool gets threads of its own: at most ``size``
run its calls at once, each a daemon thread (a call that never returns keeps its thread but never keeps
the process alive), and a call waits for a free one within its own timeout. A tool whose ``size`` calls
all hang therefore fails each further call by timeout, and nothing else notices.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# Synchronous calls of one tool running at once (each on its own daemon thread).
TOOL_THREADS = 32


class ToolThreads:
    """Runs a tool's synchronous calls on at most ``size`` daemon threads of its own.

    Args:
        name: the tool's name (names the threads).
        size: most calls running at once; a further call waits (cancellably) for one to end.
    """

    def __init__(self, name: str, size: int = TOOL_THREADS):
        self.name = name
        self.size = size
        # One semaphore per event loop: a tool object may serve loops of several threads or tests.
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    async def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on a thread of this tool; cancelling the wait leaves the thread running."""
        loop = asyncio.get_running_loop()
        slots = self._slots.setdefault(loop, asyncio.Semaphore(self.size))
        await slots.acquire()
        future: asyncio.Future = loop.create_future()

        def work() -> None:
            try:
                outcome = (fn(*args, **kwargs), None)
            except BaseException as err:  # handed to the awaiting coroutine
                outcome = (None, err)
            try:
                loop.call_soon_threadsafe(_settle, future, slots, *outcome)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

        try:
            threading.Thread(target=work, name=f"tool-{self.name}", daemon=True).start()
        except BaseException:
            slots.release()
            raise
        return await future


def _settle(
    future: asyncio.Future, slots: asyncio.Semaphore, value: Any, error: BaseException | None
) -> None:
    slots.release()
    if future.done():  # the caller timed out or was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
