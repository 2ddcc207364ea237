"""The ``fully_async`` trainer mode: the rollout streams finished groups into the replay buffer without pause.

Versions: the actor after v updates is version v; the servers' initial -1 counts as 0. With ``S`` =
``trainer.replay_buffer.max_off_policy_threshold`` and ``k`` = ``trainer.parameter_sync_step``:

* The rollout side always has prompt groups in flight: after every update (and before the first) the
  controller tops the groups not yet trained up to ``(1 + S)`` batches (``wait``: only as many as can
  still be trained within ``S`` versions of the weights the servers hold, so the rollout pauses until
  the next sync instead). Each group is submitted as of step ``v + 1``, v the servers' version, so the
  buffer's age ``global_step - global_steps`` is the weight versions between the trainer and the
  rollout, and its ``drop`` / ``wait`` machinery enforces ``S``: ``drop`` evicts older groups and has
  replacements generated now (with the newest weights), ``wait`` holds sampling.
* The agent-loop workers mark each group finished as its ``n`` samples are in, so a step samples as soon
  as ``data.train_batch_size`` groups are, whichever launch they came from.
* Every ``k`` updates (and before a validation and after the last step) the weights go to the servers
  between ``abort_all`` and ``resume``: requests in flight stop with their tokens so far and continue
  under the new weights (partial rollout), so a trajectory may hold tokens of several versions
  (``min_weight_version < max_weight_version``; ``async/partial_fraction``).

With ``S = 0`` and ``k = 1`` this is the sync trainer step for step (the same prompts, uids, seeds and
weights), only the generation of step t+1 starts right after step t's sync.

Checkpoint and resume: the buffer's checkpoint holds the partition (finished groups waiting, groups
in flight as pending), the data iterator is past every submitted prompt, and this trainer's state holds
the prompts drawn but not yet submitted and those of the groups in flight; on resume the groups still pending are generated again, as of the
restored weights, so every prompt is trained exactly once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import ray

from verl_lite.kv import KVBatchMeta
from verl_lite.trainer.ppo.trainer_base import PPOTrainer, register_trainer
from verl_lite.workers.agent_loop.manager import PendingSequences

TRAIN = "train"


@dataclass
class _Launch:
    """One launched generation and when it ran (``time.time()``; ``finished`` None while in flight)."""

    pending: PendingSequences
    started: float
    finished: float | None = None


@register_trainer("fully_async")
class FullyAsyncTrainer(PPOTrainer):
    """PPO/GRPO on groups a standalone rollout streams into the replay buffer, at most ``S`` versions stale."""

    # generation overlaps training on a pool of its own, at most the staleness bound ahead
    placement = "standalone"
    streams_rollout = True

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        trainer = self.config.trainer
        self.max_staleness = int(trainer.replay_buffer.max_off_policy_threshold)
        self.wait_for_versions = trainer.replay_buffer.off_policy_strategy == "wait"
        self.sync_every = trainer.parameter_sync_step
        # the version the servers hold (their initial -1 counts as 0)
        self.served_version = 0
        self._launches: list[_Launch] = []
        # prompts drawn from the data iterator and not submitted yet (a refill took part of a batch)
        self._drawn: list[dict] = []
        # the dataset rows of the groups submitted and not trained yet, by uid (generated again on resume)
        self._submitted_rows: dict[str, dict] = {}
        # start of the span async/rollout_idle_s covers (the first launch, then the previous step's end)
        self._window_start: float | None = None
        self._trainer_idle_s = 0.0
        self._sample_from = 0.0

    # ---- hooks ----------------------------------------------------------------------------------
    def on_generate(self, step: int) -> None:
        """Top the rollout's work up (before the first step, nothing was launched yet); no waiting here."""
        self._top_up(trained=step - 1)
        self._sample_from = time.perf_counter()

    def on_sample_end(self, batch: KVBatchMeta) -> KVBatchMeta:
        """The wait for finished groups (inside ``buffer.sample``) is the trainer's idle time."""
        self._trainer_idle_s = time.perf_counter() - self._sample_from
        return super().on_sample_end(batch)

    def on_update_end(self, step: int, batch: KVBatchMeta) -> dict[str, float]:
        """Staleness and partial share of the trained batch; sync on schedule; top the rollout up again."""
        metrics = {}
        partial = [t.get("min_weight_version", -1) < t.get("max_weight_version", -1) for t in batch.tags]
        metrics["async/partial_fraction"] = sum(partial) / max(len(partial), 1)
        if self._sync_due(step):
            with self.timed("update_weights"):
                metrics.update(self.sync_weights(step))
        self._top_up(trained=step)
        metrics["async/trainer_idle_s"] = self._trainer_idle_s
        metrics["async/rollout_idle_s"] = self._rollout_idle_s()
        return metrics

    def on_train_end(self) -> None:
        """Let the generations still in flight (replacements nobody needs any more) end before shutdown."""
        self._drain()
        super().on_train_end()

    # ---- the rollout side -----------------------------------------------------------------------
    def sync_weights(self, version: int) -> dict[str, float]:
        """The actor's weights to the servers between ``abort_all`` and ``resume`` (partial rollout)."""
        metrics = self.groups.sync_weights(version, between_aborts=True)
        self.served_version = version
        return metrics

    def refill(self, num_prompts: int) -> None:
        """``refill_fn`` of the replay buffer: replacements start now, with the newest weights; no wait."""
        self._launch(self._draw(num_prompts))

    def _top_up(self, trained: int) -> None:
        """Launch as many new groups as the look-ahead allows (see the module docstring)."""
        self._collect_finished()
        size = self.config.data.train_batch_size
        outstanding = sum(self.buffer.group_counts(TRAIN).values())  # submitted, neither trained nor evicted
        ahead = self.max_staleness + 1
        if self.wait_for_versions:
            ahead = min(ahead, self.served_version + 1 + self.max_staleness - trained)
        room = min(ahead * size, (self.total_steps - trained) * size) - outstanding
        if room > 0:
            self._launch(self._draw(room))

    def _draw(self, num_prompts: int) -> list[dict]:
        while len(self._drawn) < num_prompts:
            self._drawn.extend(next(self.train_batches))
        items, self._drawn = self._drawn[:num_prompts], self._drawn[num_prompts:]
        return items

    def _launch(self, items: list[dict]) -> None:
        # submitted as of the step the servers' weights are on-policy for: age = versions behind
        meta = self.submit_prompts(items, self.served_version + 1, TRAIN)
        self._submitted_rows.update(zip(meta.keys, items))
        self._start(meta, items)

    def _start(self, meta: KVBatchMeta, items: list[dict]) -> None:
        self._launches.append(_Launch(self.launch(meta, items), time.time()))
        if self._window_start is None:
            self._window_start = self._launches[-1].started

    def _collect_finished(self) -> None:
        """Add the reward time and fault counters of finished launches; remember when they ended."""
        for launch in self._launches:
            if launch.finished is None and launch.pending.done():
                launch.finished = launch.pending.finished_at() or time.time()
                self.finish_generation(launch.pending)

    def _rollout_idle_s(self) -> float:
        """Seconds since the last call during which no launched generation was running."""
        self._collect_finished()
        if self._window_start is None:
            return 0.0
        start, now = self._window_start, time.time()
        spans = sorted((max(x.started, start), min(x.finished or now, now)) for x in self._launches)
        busy, reached = 0.0, start
        for begin, end in spans:
            if end > reached:
                busy += end - max(begin, reached)
                reached = end
        self._launches = [x for x in self._launches if x.finished is None]
        self._window_start = now
        return max(now - start - busy, 0.0)

    def _sync_due(self, step: int) -> bool:
        trainer = self.config.trainer
        validating = step == self.total_steps or (trainer.test_freq > 0 and step % trainer.test_freq == 0)
        return step % self.sync_every == 0 or validating

    def _drain(self) -> None:
        refs = [ref for launch in self._launches if launch.finished is None for ref in launch.pending.refs]
        timeout = self.config.trainer.sample_timeout_s
        _, waiting = ray.wait(refs, num_returns=len(refs), timeout=timeout) if refs else ([], [])
        if waiting:
            raise TimeoutError(
                f"fully_async: {len(waiting)} rollout call(s) still running {timeout:g} s after the last step "
                "(trainer.sample_timeout_s)."
            )
        self._launches = []

    # ---- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The base state plus the prompts drawn but not submitted yet, and those of the groups in flight."""
        in_flight = [
            uid for status in ("pending", "running") for uid in self.buffer.group_uids(TRAIN, status)
        ]
        rows = {uid: self._submitted_rows[uid] for uid in in_flight if uid in self._submitted_rows}
        return {**super().state_dict(), "drawn": self._drawn, "in_flight_rows": rows}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._drawn = list(state.get("drawn", []))
        self._submitted_rows = dict(state.get("in_flight_rows", {}))

    def _forget_groups(self, uids: list[str]) -> None:
        super()._forget_groups(uids)
        for uid in uids:
            self._submitted_rows.pop(uid, None)

    def resume(self) -> str | None:
        """The base resume, then the groups that were in flight are generated again (as of now)."""
        path = super().resume()
        if path is not None:
            self.served_version = self.global_step
            self._relaunch_pending()
        return path

    def _relaunch_pending(self) -> None:
        uids = self.buffer.group_uids(TRAIN, "pending")
        if not uids:
            return
        # regenerated with the restored weights: their age counts from now
        meta = self.buffer.resubmit(uids, self.served_version + 1, TRAIN)
        self._start(meta, [self._submitted_rows[uid] for uid in uids])
