"""``AgentLoopManager``: the controller's handle on the rollout side (agent-loop workers + rollout servers).

The controller hands it prompt groups (keys, and the prompts themselves) and gets trajectory keys back; the agent-loop workers do the rest:
``rollout.agent.num_workers`` Ray actors of their own, or (its default in the hybrid placement) one on
each rollout server's loop, in the server's process, running that replica's share of each batch. It
also owns the rollout group's lifecycle calls that belong to a generation: the sleep after it, in the
hybrid placement, and the weight sync before it, which in the standalone placement goes through the
``RecoveryBoard`` so that servers Ray restarts get the latest weights too
(:mod:`verl_lite.workers.rollout.recovery`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import ray

from verl_lite.kv import KVBatchMeta
from verl_lite.single_controller.ray.process_env import run_env_vars
from verl_lite.utils.config import from_config
from verl_lite.utils.errors import RunTimeout
from verl_lite.utils.metrics import Metric
from verl_lite.workers.agent_loop.worker import FINISHED_AT, SERVER_RESTARTS


@dataclass
class PendingSequences:
    """A generation in flight: the agent-loop workers' ``generate_sequences`` results to come."""

    refs: list[ray.ObjectRef]
    partition_id: str
    validate: bool

    def finished_at(self) -> float | None:
        """When the last worker finished (``time.time()``), once :meth:`done`; None before."""
        if not self.done():
            return None
        ends = [out.metrics[FINISHED_AT].total for out in ray.get(self.refs) if FINISHED_AT in out.metrics]
        return max(ends, default=0.0)

    def done(self) -> bool:
        """True when every worker has finished (collecting then does not wait)."""
        ready, _ = ray.wait(self.refs, num_returns=len(self.refs), timeout=0)
        return len(ready) == len(self.refs)


class AgentLoopManager:
    """Splits each batch of prompt groups over the agent-loop workers and joins their trajectories.

    Args:
        config: the ``actor_rollout_ref`` config.
        reward_config: the ``reward`` config (the workers score trajectories with it), or None.
        rollout: the rollout ``RayWorkerGroup`` (its ``generate`` endpoints are the servers; with no
            agent-loop actors, its ``generate_sequences`` and ``decode`` endpoints run the loops).
        recovery: the standalone placement's ``RecoveryBoard`` (the rollout group's workers hold it too),
            or None in the hybrid placement, where a server lives and dies with its actor process.
    """

    def __init__(self, config: Any, reward_config: Any, rollout: Any, recovery: Any = None):
        from verl_lite.workers.agent_loop.worker import AgentLoopWorker
        from verl_lite.workers.config import RolloutConfig
        from verl_lite.workers.rollout.client import RolloutClient

        self.rollout = rollout
        self.recovery = recovery
        self.reward_config = reward_config
        self._sleeps: bool | None = None  # asked once the servers are up (the backend decides)
        self._loops_started = False
        rollout_config = from_config(RolloutConfig, config.rollout)
        self.timeout_s = rollout_config.agent.generate_timeout_s
        num_workers = rollout_config.agent_loop_actors()
        self.workers: list = []
        if num_workers == 0:  # the servers' processes run the loops (started once the servers are)
            self._generate = rollout.endpoints("generate_sequences")
            self._decode = rollout.endpoints("decode")
            self._put_scores = rollout.endpoints("put_scores")
            return
        clients = [RolloutClient(e) for e in rollout.endpoints("generate")]
        probes = rollout.endpoints("load")
        remote = ray.remote(num_cpus=0)(AgentLoopWorker)
        # the run's KV store name and extensions (user agent loops, tools and scorers load there too)
        env = {"env_vars": run_env_vars()}
        self.workers = [
            remote.options(runtime_env=env).remote(config, reward_config, clients, probes, index)
            for index in range(num_workers)
        ]
        self._generate = [w.generate_sequences for w in self.workers]
        self._decode = [w.decode for w in self.workers]
        self._put_scores = [w.put_scores for w in self.workers]
        self._loops_started = True

    @property
    def sleeps(self) -> bool:
        """Whether a generation ends with the servers' sleep: hybrid, with a backend that can sleep."""
        if self._sleeps is None:
            self._sleeps = self.recovery is None and any(self.rollout.sleeps())
        return self._sleeps

    def generate_sequences(
        self, meta: KVBatchMeta, rows: list[dict], validate: bool = False, greedy_baseline: bool = False
    ) -> KVBatchMeta:
        """Trajectories of ``meta``'s prompt groups (``n`` each), stored, scored and tagged; see the worker."""
        return self.collect_sequences(self.launch_sequences(meta, rows, validate, greedy_baseline))

    def launch_sequences(
        self, meta: KVBatchMeta, rows: list[dict], validate: bool = False, greedy_baseline: bool = False
    ) -> PendingSequences:
        """Start ``generate_sequences`` on the workers and return at once (the rollout runs meanwhile).

        ``rows`` (``prompt_rows`` of the groups' dataset rows, in ``meta``'s order) travel with the call.
        """
        self._start_loops_in_servers()
        refs, start = [], 0
        for generate, part in zip(self._generate, meta.chunk(len(self._generate))):
            if len(part):
                refs.append(generate.remote(part, rows[start : start + len(part)], validate, greedy_baseline))
            start += len(part)
        return PendingSequences(refs, meta.partition_id, validate)

    def collect_sequences(self, pending: PendingSequences) -> KVBatchMeta:
        """Wait for a launched generation; its trajectories' keys and tags (``generate_sequences``'s result).

        Raises ``TimeoutError`` naming what is still running once ``rollout.agent.generate_timeout_s`` passed.
        """
        refs = pending.refs
        _, waiting = ray.wait(refs, num_returns=len(refs), timeout=self.timeout_s)
        if waiting:
            what = "validation" if pending.validate else "training"
            raise RunTimeout(
                f"the rollout did not finish within actor_rollout_ref.rollout.agent.generate_timeout_s="
                f"{self.timeout_s:g} s: {len(waiting)} of {len(refs)} agent-loop workers were still generating "
                f"their share of the {what} batch (partition {pending.partition_id!r}); raise the key (or null "
                "for no bound) if the rollout is just slow."
            )
        out = (
            KVBatchMeta.concat(ray.get(refs)) if refs else KVBatchMeta([], partition_id=pending.partition_id)
        )
        if self.sleeps:  # scoring and training need no engine memory
            self.rollout.sleep()
        elif self.recovery is not None and not pending.validate:
            restarts = float(ray.get(self.recovery.take_restarts.remote()))
            out.metrics[SERVER_RESTARTS] = Metric(restarts, reduce="sum")
        return out

    def receive_weights(self, handle: Any, version: int) -> list[dict[str, Metric]]:
        """Every server loads the weights behind ``handle`` as ``version``; returns each one's metrics.

        Standalone: the weights are published on the board first (a server Ray restarts later loads them
        from there), a server being restarted now is waited for, one gone for good is skipped.
        """
        if self.recovery is None:
            return self.rollout.receive_weights(handle, version)
        ray.get(self.recovery.publish.remote(handle, version))
        return list(self.rollout.execute_on_live("receive_weights", handle, version).values())

    def receive_weights_between_aborts(self, handle: Any, version: int) -> list[dict[str, Metric]]:
        """:meth:`receive_weights` with the generations in flight cut short first and let go after.

        Partial rollout (standalone placement): ``abort_all`` returns every running request with its
        tokens so far and holds new ones, the agent loops resend each aborted request as prompt + those
        tokens (see ``StickyClient.generate``), and ``resume`` serves them under ``version``.
        """
        self.rollout.execute_on_live("abort_all")
        try:
            return self.receive_weights(handle, version)
        finally:
            self.rollout.execute_on_live("resume")

    def decode_trajectories(self, meta: KVBatchMeta) -> dict[str, dict[str, str]]:
        """``{key: {"prompt": text, "response": text}}`` of ``meta``'s trajectories (for the JSONL dumps)."""
        texts: dict[str, dict[str, str]] = {}
        for part in self._split_over(self._decode, meta):
            texts.update(part)
        return texts

    def put_scores(self, meta: KVBatchMeta, scores: list[float]) -> None:
        """Each trajectory's score (``scores``, in ``meta``'s order) on its last model token, written by the
        workers as ``token_level_scores``: the controller sends scalars, never the tensor."""
        self._split_over(self._put_scores, meta, scores)

    def _split_over(self, endpoints: list, meta: KVBatchMeta, *per_row: list) -> list:
        """``meta``'s rows (and each ``per_row`` list, aligned with them) cut into contiguous parts, one per
        endpoint, all called at once; the non-empty parts' results."""
        self._start_loops_in_servers()
        parts = meta.chunk(len(endpoints))
        bounds = [0, *itertools.accumulate(len(p) for p in parts)]
        calls = [
            call.remote(part, *(values[lo:hi] for values in per_row))
            for call, part, lo, hi in zip(endpoints, parts, bounds, bounds[1:])
            if len(part)
        ]
        return ray.get(calls)

    def _start_loops_in_servers(self) -> None:
        """Without agent-loop actors: have every server's process build its loops (once, after init_model)."""
        if not self._loops_started:
            self.rollout.start_agent_loops(self.reward_config)
            self._loops_started = True

    def shutdown(self) -> None:
        """End the agent-loop worker actors (loops in the servers' processes end with them)."""
        for worker in [*self.workers, *([self.recovery] if self.recovery is not None else [])]:
            ray.kill(worker)
        self.workers, self.recovery = [], None


__all__ = ["AgentLoopManager", "PendingSequences"]
