"""Where step metrics go: the registered loggers (``trainer.logger``), a progress bar, an end-of-run summary."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

from verl_lite.trainer.loggers import LOGGERS, RunInfo

__all__ = ["KEY_METRICS", "LOGGERS", "Tracker", "bar_label"]

# Metrics shown on the progress bar and in the summary, when present.
KEY_METRICS = ("critic/score/mean", "critic/acc/mean", "timing_s/step")


def bar_label(key: str) -> str:
    """The progress bar's short name for ``val-core/<data_source>/<metric>/<stat>``: ``<data_source> <stat>``
    (data sources may hold ``/``, e.g. ``openai/gsm8k``)."""
    source, _, stat = key.removeprefix("val-core/").rsplit("/", 2)
    return f"{source} {stat}"


class Tracker:
    """Fans metrics out to the configured loggers (``trainer.logger``) and draws the progress bar and the summary."""

    def __init__(
        self, loggers: list[str], run_dir: str, project: str, experiment: str, config: dict | None = None
    ):
        unknown = [name for name in loggers if name not in LOGGERS]
        if unknown:
            raise ValueError(f"trainer.logger has unknown entries {unknown}; valid: {LOGGERS.names()}.")
        os.makedirs(run_dir, exist_ok=True)
        self.run_dir = run_dir
        self._bar = None
        run = RunInfo(run_dir, project, experiment, config, progress_active=lambda: self._bar is not None)
        self.loggers = {name: LOGGERS.get(name)(run) for name in dict.fromkeys(loggers)}

    def progress(self, steps: Iterable[int]) -> Iterator[int]:
        """Iterate ``steps`` under a tqdm bar showing reward, accuracy and seconds per step."""
        from tqdm import tqdm

        self._bar = tqdm(steps, desc="training", unit="step", dynamic_ncols=True)
        yield from self._bar
        self._bar.close()

    def rewind(self, step: int) -> None:
        """On resume after ``step``: each logger drops or continues what it logged later."""
        for logger in self.loggers.values():
            if hasattr(logger, "rewind"):
                logger.rewind(step)

    def archive_previous(self) -> str | None:
        """On a fresh start: loggers move an earlier run's output aside; returns where ``metrics.jsonl`` went."""
        moved = None
        for logger in self.loggers.values():
            if hasattr(logger, "archive_previous"):
                moved = logger.archive_previous() or moved
        return moved

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Send one step's metrics to every logger and the progress bar."""
        if not metrics:
            return
        for logger in self.loggers.values():
            logger.log(metrics, step)
        if self._bar is not None:
            shown = {
                k.split("/")[-2] if k.endswith("/mean") else k.split("/")[-1]: f"{v:.3f}"
                for k, v in metrics.items()
                if k in KEY_METRICS
            }
            shown.update({bar_label(k): f"{v:.3f}" for k, v in metrics.items() if k.startswith("val-core/")})
            self._bar.set_postfix(shown)

    def finish(self, history: list[dict[str, Any]]) -> None:
        """Print a summary table, draw ``reward_curve.png`` and close the loggers."""
        from verl_lite.trainer.summary import accuracy_headline, summary_table, write_reward_curve

        if history:
            curve = os.path.join(self.run_dir, "reward_curve.png")
            write_reward_curve(history, curve)
            headline = accuracy_headline(history)
            print(
                summary_table(history) + (f"\n\n{headline}" if headline else "") + f"\nreward curve: {curve}",
                flush=True,
            )
        for logger in self.loggers.values():
            logger.finish()
