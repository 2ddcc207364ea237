"""The ``jsonl`` logger: one line ``{"step": ..., **metrics}`` per step in ``run_dir/metrics.jsonl``."""

from __future__ import annotations

import json
import os
import time

from .base import RunInfo, register_logger


@register_logger("jsonl")
class JsonlLogger:
    def __init__(self, run: RunInfo):
        self.run_dir = run.run_dir
        self.path = os.path.join(run.run_dir, "metrics.jsonl")
        self._file = open(self.path, "a")

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._file.write(json.dumps({"step": step, **metrics}) + "\n")
        self._file.flush()

    def rewind(self, step: int) -> None:
        """On resume: drop the lines after ``step`` (the steps about to be redone)."""
        self._file.close()
        with open(self.path) as f:
            kept = [line for line in f if line.strip() and json.loads(line).get("step", 0) <= step]
        with open(self.path + ".tmp", "w") as f:
            f.writelines(kept)
        os.replace(self.path + ".tmp", self.path)
        self._file = open(self.path, "a")

    def archive_previous(self) -> str | None:
        """On a fresh start: move an earlier run's file aside (``metrics.<time>.jsonl``); returns it."""
        if self._file.tell() == 0:
            return None
        self._file.close()
        archived = os.path.join(self.run_dir, f"metrics.{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
        os.replace(self.path, archived)
        self._file = open(self.path, "a")
        return archived

    def finish(self) -> None:
        self._file.close()
