"""The ``console`` logger: validation metrics (or, without a progress bar, every metric) printed per step."""

from __future__ import annotations

from .base import RunInfo, register_logger


@register_logger("console")
class ConsoleLogger:
    def __init__(self, run: RunInfo):
        self.run = run

    def log(self, metrics: dict[str, float], step: int) -> None:
        val = {k: v for k, v in metrics.items() if k.startswith("val-core/")}
        if val or not self.run.progress_active():
            shown = sorted(val.items()) or metrics.items()
            print(f"[step {step}] " + " ".join(f"{k}={v:.4f}" for k, v in shown), flush=True)

    def finish(self) -> None:
        pass
