"""The ``tensorboard`` logger: every metric as a scalar under ``run_dir/tensorboard``."""

from __future__ import annotations

import os

from .base import RunInfo, register_logger


@register_logger("tensorboard")
class TensorboardLogger:
    def __init__(self, run: RunInfo):
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(os.path.join(run.run_dir, "tensorboard"))

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, step)

    def finish(self) -> None:
        self._writer.close()
