"""Training engines behind a registry: ``get_engine("fsdp")`` is the FSDP2 engine."""

from verl_lite.workers.engine.base import (
    ENGINES,
    HF_CONFIG_DIR,
    TrainingEngine,
    get_engine,
    init_distributed,
    register_engine,
)
from verl_lite.workers.engine.fsdp import FSDPEngine

__all__ = [
    "ENGINES",
    "HF_CONFIG_DIR",
    "FSDPEngine",
    "TrainingEngine",
    "get_engine",
    "init_distributed",
    "register_engine",
]
