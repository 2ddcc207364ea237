"""Importing this module registers every built-in trainer mode (``trainer.mode``) with ``register_trainer``."""

from verl_lite.trainer.multi_agent import trainer_magrpo
from verl_lite.trainer.ppo import trainer_fully_async, trainer_one_step_off, trainer_sync

BUILTIN_MODE_MODULES = (trainer_sync, trainer_one_step_off, trainer_fully_async, trainer_magrpo)

__all__ = ["BUILTIN_MODE_MODULES"]
