"""Weight sync from training to rollout, behind a registry: ``naive``, ``ray`` (and ``nccl`` on GPUs)."""

from verl_lite.checkpoint_engine.base import (
    CHECKPOINT_ENGINES,
    CheckpointEngine,
    buckets,
    get_checkpoint_engine,
    register_checkpoint_engine,
)
from verl_lite.checkpoint_engine.naive import NaiveCheckpointEngine
from verl_lite.checkpoint_engine.nccl import NcclCheckpointEngine
from verl_lite.checkpoint_engine.ray_store import RayCheckpointEngine

__all__ = [
    "CHECKPOINT_ENGINES",
    "CheckpointEngine",
    "NaiveCheckpointEngine",
    "NcclCheckpointEngine",
    "RayCheckpointEngine",
    "buckets",
    "get_checkpoint_engine",
    "register_checkpoint_engine",
]
