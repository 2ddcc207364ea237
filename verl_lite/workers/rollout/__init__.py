"""Rollout backends behind a registry: ``hf`` (transformers generate) and ``vllm`` (when installed)."""

from verl_lite.workers.rollout.base import ROLLOUTS, Generation, RolloutBackend, get_rollout, register_rollout
from verl_lite.workers.rollout.hf import HFRollout
from verl_lite.workers.rollout.vllm_rollout import VLLMRollout

__all__ = [
    "ROLLOUTS",
    "Generation",
    "HFRollout",
    "RolloutBackend",
    "VLLMRollout",
    "get_rollout",
    "register_rollout",
]
