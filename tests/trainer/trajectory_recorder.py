"""A trainer mode for tests that keeps each step's stored token ids and masks in the run folder.

Loaded with ``trainer.extensions`` and selected as ``trainer.mode=sync_recording``: the sync loop as
is, plus, after the updates, the step's ``prompts``, ``responses`` and ``response_mask`` read back from
the KV store (what the actor trained on) into ``<run_dir>/trajectories/<step>.json``, one entry per
trajectory key. It records; it changes nothing the run does.
"""

from __future__ import annotations

import json
import os

from verl_lite.trainer.ppo.trainer_base import register_trainer
from verl_lite.trainer.ppo.trainer_sync import SyncTrainer
from verl_lite.trajectory import read_columns

RECORDED = ("prompts", "responses", "response_mask")


@register_trainer("sync_recording")
class RecordingSyncTrainer(SyncTrainer):
    """``sync`` that writes the step's stored columns :data:`RECORDED` before the weight sync."""

    def on_update_end(self, step, batch):
        columns = read_columns(self.kv, batch, RECORDED)
        values = {name: [t.tolist() for t in columns.get(name).unbind()] for name in RECORDED}
        rows = {key: {name: values[name][i] for name in RECORDED} for i, key in enumerate(batch.keys)}
        directory = os.path.join(self.config.trainer.run_dir, "trajectories")
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, f"{step}.json"), "w") as f:
            json.dump(rows, f)
        return super().on_update_end(step, batch)
