"""Multi-agent training with CoMLRL 1.4's API (MAGRPO, MAREINFORCE, MAReMax, MARLOO, IAC, MAAC) on the single
controller: configs, trainers, callbacks. ``from comlrl.trainers import X`` becomes ``from
verl_lite.trainer.multi_agent import X``."""

from verl_lite.trainer.multi_agent.callbacks import RewardProcessors
from verl_lite.trainer.multi_agent.config import (
    IACConfig,
    MAACConfig,
    MAGRPOConfig,
    MAREINFORCEConfig,
    MAReMaxConfig,
    MARLOOConfig,
)

__all__ = [
    "IACConfig",
    "IACTrainer",
    "MAACConfig",
    "MAACTrainer",
    "MAGRPOConfig",
    "MAGRPOTrainer",
    "MAREINFORCEConfig",
    "MAREINFORCETrainer",
    "MAReMaxConfig",
    "MAReMaxTrainer",
    "MARLOOConfig",
    "MARLOOTrainer",
    "RewardProcessors",
]
_TRAINERS = (
    "MAGRPOTrainer",
    "IACTrainer",
    "MAACTrainer",
    "MAREINFORCETrainer",
    "MAReMaxTrainer",
    "MARLOOTrainer",
)


def __getattr__(name: str):
    # the trainers pull in Ray and transformers; the configs and callbacks stay light to import
    if name in _TRAINERS:
        from verl_lite.trainer.multi_agent import api

        return getattr(api, name)
    raise AttributeError(name)
