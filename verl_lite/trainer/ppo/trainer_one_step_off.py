"""The ``one_step_off`` trainer mode: the rollout generates step t+1's batch while step t trains.

Schedule of step t (weights version v = the actor after v updates; the servers' initial -1 is version 0)::

    collect batch t (launched during step t-1; the wait is async/trainer_idle_s)  -- step 1 generates it here
    launch the generation of batch t+1 on the servers, which hold version t-1
    sample, score, update: version t                                              -- overlaps the rollout
    wait for batch t+1, then sync version t to the servers                        -- timing_s/update_weights

So every trained batch except the first comes from weights exactly one version older than the
policy it updates (``async/staleness/max`` = 1), and the generation after a sync uses its weights.
The servers never change weights mid-generation, because the sync waits for the batch in flight.

Checkpoint and resume: a step ends with no generation in flight, and batch t+1's finished groups
waiting in the replay buffer's partition. The buffer's checkpoint state holds that partition's keys,
tags and tensors, and the data iterator's state is past batch t+1's prompts, so a resumed run
trains batch t+1 from the buffer instead of generating it again: no prompt is lost or trained twice,
and the schedule continues exactly as without the interruption.

Needs ``actor_rollout_ref.rollout.mode=standalone`` (the rollout's own pool), so that generating
and training can run at the same time.
"""

from __future__ import annotations

import time
from typing import Any

from verl_lite.kv import KVBatchMeta
from verl_lite.trainer.ppo.trainer_base import PPOTrainer, register_trainer
from verl_lite.workers.agent_loop.manager import PendingSequences


@register_trainer("one_step_off")
class OneStepOffTrainer(PPOTrainer):
    """PPO/GRPO with generation one step ahead of training on a standalone rollout pool."""

    # generation overlaps training: the servers need a pool of their own
    placement = "standalone"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # the generation launched for the next step, until it is collected at the end of this one
        self._pending: PendingSequences | None = None
        # True when the next step's groups are already finished in the buffer
        self._prefetched = False
        self._idle_s = 0.0

    def on_generate(self, step: int) -> None:
        """Step 1 (or a run without a prefetched batch) generates now; then the next step's batch starts."""
        self._idle_s = 0.0
        size = self.config.data.train_batch_size
        if not self._prefetched:
            start = time.perf_counter()
            self.generate(step, size)
            self._idle_s += time.perf_counter() - start
        self._prefetched = False
        if step < self.total_steps:
            self._pending = self.start_generation(step, size)

    def on_update_end(self, step: int, batch: KVBatchMeta) -> dict[str, float]:
        """Staleness of the trained batch; wait for the next batch, then sync this step's weights."""
        metrics = {}
        if self._pending is not None:
            start = time.perf_counter()
            self.finish_generation(self._pending)
            self._idle_s += time.perf_counter() - start
            self._pending, self._prefetched = None, True
        with self.timed("update_weights"):
            metrics.update(self.sync_weights(step))
        metrics["async/trainer_idle_s"] = self._idle_s
        return metrics

    def state_dict(self) -> dict[str, Any]:
        """The base state plus whether the next step's batch is already in the buffer."""
        return {**super().state_dict(), "prefetched": self._prefetched}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._prefetched = bool(state.get("prefetched", False))
