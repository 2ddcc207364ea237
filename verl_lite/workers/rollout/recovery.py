"""What a restarted standalone rollout server needs to serve again: the latest weights, kept by a board.

Surviving a dead server (the ``standalone`` placement) works like this. Ray restarts a
``RolloutWorker`` whose process died (``rollout.max_restarts``) by running its constructor again, with
the arguments it was first built with; one of them is a handle on this board. Every constructor
reports to the board on arrival: the first arrival of a rank is a start, any later one a restart. A
replacement then starts its server and loads the weights the controller last published here before it
returns, and Ray sends it no request before its constructor has returned, so it never serves stale
weights. The controller publishes every sync here before sending it, and a sync waits for a server Ray
is still restarting (``RayWorkerGroup.execute_on_live``), which closes the gap between a replacement
reading the board and the next publish. Requests in flight on the dead server are retried by the agent
loops (``verl_lite.workers.agent_loop.servers``).

The board holds the published handle (with the ``ray`` engine, the weights' object refs), so the
latest weights stay in Ray's object store until the next sync replaces them: one copy of the model.
"""

from __future__ import annotations

from typing import Any

import ray


@ray.remote(num_cpus=0)
class RecoveryBoard:
    """The latest published weights and how often each rollout rank has (re)started."""

    def __init__(self) -> None:
        self._latest: tuple[Any, int] | None = None
        self._arrivals: dict[int, int] = {}
        self._unreported_restarts = 0

    def publish(self, handle: Any, version: int) -> None:
        """Remember ``handle`` (what ``receive_weights`` takes) as the weights of ``version``."""
        self._latest = (handle, version)

    def arrive(self, rank: int) -> tuple[bool, tuple[Any, int] | None]:
        """Called by each ``RolloutWorker`` constructor: (whether this is a restart, the latest weights)."""
        restarted = rank in self._arrivals
        self._arrivals[rank] = self._arrivals.get(rank, 0) + 1
        self._unreported_restarts += int(restarted)
        return restarted, self._latest

    def take_restarts(self) -> int:
        """Restarts since the last call (each is reported once)."""
        count, self._unreported_restarts = self._unreported_restarts, 0
        return count


__all__ = ["RecoveryBoard"]
