"""Step-metrics loggers: the registry (``LOGGERS``, ``register_logger``) and the built-in ones.

Each built-in registers itself in its own module; importing this package registers them all
(the heavy clients, wandb, mlflow and tensorboard, load only when a run uses them).
"""

from . import console_logger, jsonl_logger, mlflow_logger, tensorboard_logger, wandb_logger  # noqa: F401
from .base import LOGGERS, Logger, RunInfo, register_logger, saved_run_id

__all__ = ["LOGGERS", "Logger", "RunInfo", "register_logger", "saved_run_id"]
