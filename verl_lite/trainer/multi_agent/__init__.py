"""Multi-agent training (CoMLRL's MAGRPO) on the single controller: config, trainer, task callbacks."""

from verl_lite.trainer.multi_agent.callbacks import RewardProcessors
from verl_lite.trainer.multi_agent.config import MAGRPOConfig

__all__ = ["MAGRPOConfig", "MAGRPOTrainer", "RewardProcessors"]


def __getattr__(name: str):
    # the trainer pulls in Ray and transformers; the config and callbacks stay light to import
    if name == "MAGRPOTrainer":
        from verl_lite.trainer.multi_agent.api import MAGRPOTrainer

        return MAGRPOTrainer
    raise AttributeError(name)
