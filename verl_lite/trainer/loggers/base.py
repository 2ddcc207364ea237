"""The logger registry: what a step-metrics logger receives, and ``@register_logger(name)``.

A logger is a class built as ``cls(run)`` from a :class:`RunInfo`; ``trainer.logger`` names the
ones a run uses. Register a custom one in a ``trainer.extensions`` file::

    from verl_lite.trainer.loggers import register_logger

    @register_logger("my_logger")
    class MyLogger:
        def __init__(self, run): ...
        def log(self, metrics, step): ...   # one step's {name: float}
        def finish(self): ...

Optional hooks, called by the trainer before the first ``log``: ``rewind(step)`` when the run
resumes after ``step`` (drop or continue what was logged later), and ``archive_previous()`` on a
fresh start in a folder an earlier run used (returns where its output moved, or None).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from verl_lite.utils.registry import Registry


@dataclass
class RunInfo:
    """What every logger is built from."""

    run_dir: str
    """The run's folder (``run_dir/experiment_name``); file loggers write under it."""
    project: str
    experiment: str
    config: dict[str, Any] | None = None
    """The resolved config, for loggers that record it."""
    progress_active: Callable[[], bool] = field(default=lambda: False)
    """Whether a progress bar shows the step metrics now (the console then prints validation only)."""


class Logger(Protocol):
    """Receives each step's metrics; ``finish`` closes it at the end of the run."""

    def __init__(self, run: RunInfo) -> None: ...

    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def finish(self) -> None: ...


LOGGERS: Registry[type[Logger]] = Registry("logger")


def register_logger(name: str):
    """Class decorator: make a logger selectable in ``trainer.logger``."""
    return LOGGERS.register(name)


def saved_run_id(run: RunInfo, backend: str, resume: bool, new_id: Callable[[], str]) -> str:
    """The run id a tracking service continues on resume (saved in the run folder), or a new, saved one."""
    path = os.path.join(run.run_dir, f"{backend}_run_id")
    if resume and os.path.exists(path):
        with open(path) as f:
            return f.read().strip()
    run_id = new_id()
    with open(path, "w") as f:
        f.write(run_id)
    return run_id
