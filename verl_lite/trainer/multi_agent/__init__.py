"""Multi-agent training (CoMLRL's MAGRPO, IAC, MAAC) on the single controller: configs, trainers, callbacks."""

from verl_lite.trainer.multi_agent.callbacks import RewardProcessors
from verl_lite.trainer.multi_agent.config import IACConfig, MAACConfig, MAGRPOConfig

__all__ = [
    "IACConfig",
    "IACTrainer",
    "MAACConfig",
    "MAACTrainer",
    "MAGRPOConfig",
    "MAGRPOTrainer",
    "RewardProcessors",
]
_TRAINERS = ("MAGRPOTrainer", "IACTrainer", "MAACTrainer")


def __getattr__(name: str):
    # the trainers pull in Ray and transformers; the configs and callbacks stay light to import
    if name in _TRAINERS:
        from verl_lite.trainer.multi_agent import api

        return getattr(api, name)
    raise AttributeError(name)
