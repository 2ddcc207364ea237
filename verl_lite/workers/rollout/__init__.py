"""Rollout servers behind a registry: ``hf`` (dynamic batching on transformers) and ``vllm`` (AsyncLLM).

``HFRollout`` / ``VLLMRollout`` (and ``RolloutBackend`` / ``Generation``) are the blocking batch classes the
training worker still calls; they are not registered and leave once the worker uses the servers.
"""

from verl_lite.workers.rollout.base import Generation, RolloutBackend
from verl_lite.workers.rollout.hf import HFRollout, HFServer
from verl_lite.workers.rollout.host import ServerHost
from verl_lite.workers.rollout.server import (
    ROLLOUTS,
    RolloutServer,
    TokenOutput,
    get_rollout,
    register_rollout,
)
from verl_lite.workers.rollout.vllm_rollout import VLLMRollout, VLLMServer

__all__ = [
    "ROLLOUTS",
    "Generation",
    "HFRollout",
    "HFServer",
    "RolloutBackend",
    "RolloutServer",
    "ServerHost",
    "TokenOutput",
    "VLLMRollout",
    "VLLMServer",
    "get_rollout",
    "register_rollout",
]
