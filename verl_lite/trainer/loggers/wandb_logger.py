"""The ``wandb`` logger: a W&B run (``WANDB_MODE=offline`` honoured) that a resumed run continues.

The run id is kept in ``run_dir/wandb_run_id``: a run that resumes from a checkpoint
(``trainer.resume_mode``) logs its later steps to the same W&B run; a fresh start opens a new one.
In offline mode W&B writes each process's part to its own ``offline-run-*`` folder under that one
id, and ``wandb sync`` uploads them to the same run.
"""

from __future__ import annotations

import uuid

from .base import RunInfo, register_logger, saved_run_id


@register_logger("wandb")
class WandbLogger:
    def __init__(self, run: RunInfo):
        self.run = run
        self._wandb_run = None  # opened once the trainer says fresh or resumed (or at the first log)

    def _open(self, resume: bool) -> None:
        import wandb

        run_id = saved_run_id(self.run, "wandb", resume, lambda: uuid.uuid4().hex[:8])
        self._wandb_run = wandb.init(
            project=self.run.project,
            name=self.run.experiment,
            config=self.run.config,
            dir=self.run.run_dir,
            id=run_id,
            resume="allow",
        )

    def rewind(self, step: int) -> None:
        self._open(resume=True)

    def archive_previous(self) -> None:
        self._open(resume=False)

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self._wandb_run is None:
            self._open(resume=False)
        self._wandb_run.log(metrics, step=step)

    @property
    def run_id(self) -> str | None:
        return None if self._wandb_run is None else self._wandb_run.id

    def finish(self) -> None:
        if self._wandb_run is not None:
            self._wandb_run.finish()
