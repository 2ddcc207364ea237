"""Where an agent loop's request goes: the least-loaded live rollout server, and another one if that dies.

A trajectory's first request picks the server with the fewest requests in flight and later turns stay
there (its prefix cache). When the server's process dies under a request, Ray fails the call with a
``RayActorError`` (``ActorUnavailableError`` while Ray restarts the actor, ``ActorDiedError`` once it is
gone for good), and the request is sent again, with the whole context so far, to the least-loaded live
server. That resend is the same request: a trajectory's tokens are appended only when a request
returns, and a request's sampling seed depends on its id alone (``request_seed``), which the resend
keeps. The failed server is left out meanwhile and polled until it serves again (restarted by Ray;
the replacement loads the latest weights before Ray lets it take requests, see
:mod:`verl_lite.workers.rollout.recovery`) or is gone for good, when it is dropped. With no server
left, the request raises :class:`NoRolloutServerLeft`; while only restarting ones are left, it waits.
A request cut short by ``abort_all`` (a weight sync in ``trainer.mode=fully_async``) is continued from
its tokens so far under the new weights (partial rollout, :meth:`StickyClient.generate`).
"""

from __future__ import annotations

import asyncio
import itertools
import sys

import ray

from verl_lite.utils.errors import RunError
from verl_lite.workers.config import SamplingConfig
from verl_lite.workers.rollout.server import TokenOutput

# Seconds between two polls of a server that failed, until Ray has restarted it or declared it dead.
POLL_S = 0.5
# Aborted continuations in a row without a new token after which a trajectory gives up (a server that
# keeps aborting would otherwise spin forever).
MAX_EMPTY_CONTINUATIONS = 100


class NoRolloutServerLeft(RunError):
    """Every rollout server died and none can be restarted: the run cannot generate any more."""


class LeastLoadedServers:
    """The rollout servers one agent-loop worker sends to: load in flight from this worker, and liveness.

    Args:
        endpoints: each server's client (``RolloutClient`` or ``InProcessClient``), in replica order.
        probes: each server's ``load`` endpoint, polled after a failure to learn whether it came back.
        offset: staggers the tie-break between agent-loop workers (ties go to the lowest offset index),
            so that several workers starting at once spread their first requests over the servers.
        death_note: the end of the :class:`NoRolloutServerLeft` message (what would have kept a server).
    """

    def __init__(self, endpoints: list, probes: list | None = None, offset: int = 0, death_note: str = ""):
        if not endpoints:
            raise ValueError("the agent-loop manager got no rollout servers.")
        self.endpoints = list(endpoints)
        self.probes = list(probes) if probes is not None else None
        self.in_flight = [0] * len(endpoints)
        self.offset = offset
        self.death_note = death_note
        self.live = set(range(len(endpoints)))
        self.dead: set[int] = set()
        # requests sent again after their server died, over this worker's lifetime
        self.retried = 0
        self._changed = asyncio.Event()
        self._watchers: dict[int, asyncio.Task] = {}

    def pick(self) -> int:
        """The index of the least-loaded live server (call only while one is live)."""
        n = len(self.endpoints)
        order = [(self.offset + i) % n for i in range(n) if (self.offset + i) % n in self.live]
        return min(order, key=lambda i: self.in_flight[i])

    async def pick_live(self) -> int:
        """The least-loaded live server, waiting while only restarting ones are left."""
        while not self.live:
            if len(self.dead) == len(self.endpoints):
                dead = ", ".join(map(str, sorted(self.dead)))
                raise NoRolloutServerLeft(
                    f"every rollout server is gone: server {dead} died and cannot be restarted{self.death_note}."
                )
            self._changed.clear()
            await self._changed.wait()
        return self.pick()

    def report_failure(self, index: int, err: BaseException) -> None:
        """Server ``index`` failed a request with ``err`` (a ``RayActorError``): leave it out until it is back."""
        if index not in self.live:
            return
        self.live.discard(index)
        where = (
            f"go to the {len(self.live)} live server(s)" if self.live else "wait for a server to come back"
        )
        print(
            f"verl_lite: rollout server {index} died ({type(err).__name__}); its requests {where}.",
            file=sys.stderr,
            flush=True,
        )
        if self.probes is None:
            self._mark_dead(index)
        else:
            self._watchers[index] = asyncio.ensure_future(self._watch(index))

    async def _watch(self, index: int) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            try:
                await self.probes[index].remote()
            except ray.exceptions.ActorUnavailableError:
                continue  # Ray is restarting it
            except ray.exceptions.RayActorError:  # ActorDiedError: no restart left
                self._mark_dead(index)
                return
            self.live.add(index)
            self._changed.set()
            return

    def _mark_dead(self, index: int) -> None:
        self.dead.add(index)
        print(
            f"verl_lite: rollout server {index} is gone for good (no restart left); {len(self.live)} live "
            "server(s) left.",
            file=sys.stderr,
            flush=True,
        )
        self._changed.set()


class StickyClient:
    """A ``ServerClient`` for one trajectory: its first request picks a server, later turns stay there."""

    def __init__(self, servers: LeastLoadedServers, request_prefix: str):
        self.servers = servers
        self.request_prefix = request_prefix
        self.server_index: int | None = None
        self._turn = itertools.count()

    async def generate(self, prompt_ids: list[int], sampling: SamplingConfig, max_tokens: int) -> TokenOutput:
        """One generation; a request that ``abort_all`` cut short (a weight sync) is continued.

        Partial rollout: the continuation sends prompt + the tokens so far with the rest of the budget, so
        it runs under the new weights once the server resumes; the pieces join into one contiguous output
        whose ``min_weight_version`` is the oldest piece's and ``weight_version`` the newest's.
        """
        out = await self._request(prompt_ids, sampling, max_tokens)
        tokens, log_probs, oldest = list(out.token_ids), list(out.log_probs), out.min_weight_version
        empty = 0
        while out.finish_reason == "abort" and len(tokens) < max_tokens:
            out = await self._request(list(prompt_ids) + tokens, sampling, max_tokens - len(tokens))
            empty = 0 if out.token_ids else empty + 1
            if empty >= MAX_EMPTY_CONTINUATIONS:
                raise RuntimeError(
                    f"request {self.request_prefix!r} was aborted {empty} times in a row before it produced a "
                    "token: the rollout server keeps aborting (abort_all without resume?)."
                )
            tokens += list(out.token_ids)
            log_probs += list(out.log_probs)
            oldest = min(oldest, out.min_weight_version)
        reason = "length" if out.finish_reason == "abort" else out.finish_reason
        return TokenOutput(tokens, log_probs, reason, out.weight_version, min_weight_version=oldest)

    async def _request(self, prompt_ids: list[int], sampling: SamplingConfig, max_tokens: int) -> TokenOutput:
        """Send one request (the whole context so far) to this trajectory's server, or a live one if it died."""
        request_id = f"{self.request_prefix}-{next(self._turn)}"
        servers, resend = self.servers, False
        while True:
            if self.server_index is None or self.server_index not in servers.live:
                self.server_index = await servers.pick_live()
            index = self.server_index
            servers.retried += int(resend)
            servers.in_flight[index] += 1
            try:
                return await servers.endpoints[index].generate(request_id, prompt_ids, sampling, max_tokens)
            except ray.exceptions.RayActorError as err:
                servers.report_failure(index, err)
                resend = True
            finally:
                servers.in_flight[index] -= 1


__all__ = ["LeastLoadedServers", "NoRolloutServerLeft", "StickyClient"]
