"""The ``sync`` trainer mode: generate, then train on exactly that data, every step (on-policy)."""

from verl_lite.trainer.ppo.trainer_base import PPOTrainer, register_trainer


@register_trainer("sync")
class SyncTrainer(PPOTrainer):
    """Strictly on-policy: the base loop as is (every hook keeps its default)."""
