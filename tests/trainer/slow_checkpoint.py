"""Trainer mode ``slow_save``: the sync trainer with a checkpoint write that takes 3 s more, announced by a file.

Loaded with ``trainer.extensions``. After the actor's shards are in the ``.partial`` folder, the controller's
state is written; this mode first drops ``saving_<step>`` into ``$SLOW_SAVE_DIR`` and sleeps, so a test can
send a signal while a checkpoint is half written.
"""

from __future__ import annotations

import os
import time

from verl_lite.trainer.ppo.trainer_base import register_trainer
from verl_lite.trainer.ppo.trainer_sync import SyncTrainer


@register_trainer("slow_save")
class SlowSaveTrainer(SyncTrainer):
    def state_dict(self):
        with open(os.path.join(os.environ["SLOW_SAVE_DIR"], f"saving_{self.global_step}"), "w"):
            pass
        time.sleep(3.0)
        return super().state_dict()
