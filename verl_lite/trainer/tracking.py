"""Where step metrics go: console, jsonl, wandb, tensorboard; a progress bar; an end-of-run summary."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from typing import Any

LOGGERS = ("console", "jsonl", "wandb", "tensorboard")
# Metrics shown on the progress bar and in the summary, when present.
KEY_METRICS = ("critic/score/mean", "critic/acc/mean", "timing_s/step")


class Tracker:
    """Fans metrics out to the configured loggers and draws the progress bar and the summary."""

    def __init__(
        self, loggers: list[str], run_dir: str, project: str, experiment: str, config: dict | None = None
    ):
        unknown = [name for name in loggers if name not in LOGGERS]
        if unknown:
            raise ValueError(f"trainer.logger has unknown entries {unknown}; valid: {list(LOGGERS)}.")
        self.loggers = list(loggers)
        self.run_dir = run_dir
        os.makedirs(run_dir, exist_ok=True)
        self._bar = None
        self._jsonl = open(os.path.join(run_dir, "metrics.jsonl"), "a") if "jsonl" in loggers else None
        self._wandb = self._tensorboard = None
        if "wandb" in loggers:
            import wandb

            self._wandb = wandb.init(project=project, name=experiment, config=config, dir=run_dir)
        if "tensorboard" in loggers:
            from torch.utils.tensorboard import SummaryWriter

            self._tensorboard = SummaryWriter(os.path.join(run_dir, "tensorboard"))

    def progress(self, steps: Iterable[int]) -> Iterator[int]:
        """Iterate ``steps`` under a tqdm bar showing reward, accuracy and seconds per step."""
        from tqdm import tqdm

        self._bar = tqdm(steps, desc="training", unit="step", dynamic_ncols=True)
        yield from self._bar
        self._bar.close()

    def rewind(self, step: int) -> None:
        """On resume: drop ``metrics.jsonl`` lines after ``step`` (the steps about to be redone)."""
        if self._jsonl is None:
            return
        path = self._jsonl.name
        self._jsonl.close()
        with open(path) as f:
            kept = [line for line in f if line.strip() and json.loads(line).get("step", 0) <= step]
        with open(path + ".tmp", "w") as f:
            f.writelines(kept)
        os.replace(path + ".tmp", path)
        self._jsonl = open(path, "a")

    def archive_previous(self) -> str | None:
        """On a fresh start: move an earlier run's ``metrics.jsonl`` aside (``metrics.<time>.jsonl``); returns it."""
        if self._jsonl is None or self._jsonl.tell() == 0:
            return None
        path = self._jsonl.name
        self._jsonl.close()
        archived = os.path.join(self.run_dir, f"metrics.{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
        os.replace(path, archived)
        self._jsonl = open(path, "a")
        return archived

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Send one step's metrics to every logger."""
        if not metrics:
            return
        if self._jsonl is not None:
            self._jsonl.write(json.dumps({"step": step, **metrics}) + "\n")
            self._jsonl.flush()
        if self._wandb is not None:
            self._wandb.log(metrics, step=step)
        if self._tensorboard is not None:
            for key, value in metrics.items():
                self._tensorboard.add_scalar(key, value, step)
        if self._bar is not None:
            shown = {
                k.split("/")[-2] if k.endswith("/mean") else k.split("/")[-1]: f"{v:.3f}"
                for k, v in metrics.items()
                if k in KEY_METRICS
            }
            shown.update(
                {k.split("/")[1]: f"{v:.3f}" for k, v in metrics.items() if k.startswith("val-core/")}
            )
            self._bar.set_postfix(shown)
        if "console" in self.loggers:
            val = {k: v for k, v in metrics.items() if k.startswith("val-core/")}
            if val or self._bar is None:
                print(
                    f"[step {step}] "
                    + " ".join(f"{k}={v:.4f}" for k, v in sorted(val.items()) or metrics.items()),
                    flush=True,
                )

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
        if self._jsonl is not None:
            self._jsonl.close()
        if self._wandb is not None:
            self._wandb.finish()
        if self._tensorboard is not None:
            self._tensorboard.close()
