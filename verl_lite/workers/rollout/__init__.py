"""Rollout servers behind a registry: ``hf`` (dynamic batching on transformers) and ``vllm`` (AsyncLLM).

``RolloutWorker`` (``worker.py``) hosts one server per replica; ``ServerHost`` runs it on its own event loop.
"""

from verl_lite.workers.rollout.hf import HFServer
from verl_lite.workers.rollout.host import ServerHost
from verl_lite.workers.rollout.server import (
    ROLLOUTS,
    RolloutServer,
    TokenOutput,
    get_rollout,
    register_rollout,
)
from verl_lite.workers.rollout.vllm_rollout import VLLMServer

__all__ = [
    "ROLLOUTS",
    "HFServer",
    "RolloutServer",
    "ServerHost",
    "TokenOutput",
    "VLLMServer",
    "get_rollout",
    "register_rollout",
]
