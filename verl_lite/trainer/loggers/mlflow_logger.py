"""The ``mlflow`` logger: an MLflow run (experiment = project, run name = experiment) per training run.

Where: ``MLFLOW_TRACKING_URI`` when set (a tracking server, or ``sqlite:///...`` with the full
``mlflow`` package); else a local file store in ``run_dir/mlruns``, which ``mlflow-skinny`` reads and
writes. MLflow 3 keeps that store in maintenance mode behind ``MLFLOW_ALLOW_FILE_STORE=true``, which
this logger sets for its own default only (a reader sets it too: ``mlflow ui`` or ``MlflowClient``).
Metric names keep their ``/``; characters MLflow refuses become ``_`` (``mean@4`` -> ``mean_at_4``).
The run id is kept in ``run_dir/mlflow_run_id``, so a resumed run continues the same MLflow run.
"""

from __future__ import annotations

import os
import re
import time

from .base import RunInfo, register_logger, saved_run_id

_REFUSED = re.compile(r"[^\w./\- :]")
MAX_BATCH = 1000  # MLflow's limit of metrics per log_batch call


def mlflow_key(name: str) -> str:
    """``name`` as MLflow accepts it: ``@`` spelled ``_at_``, any other refused character ``_``."""
    return _REFUSED.sub("_", name.replace("@", "_at_"))


@register_logger("mlflow")
class MLflowLogger:
    def __init__(self, run: RunInfo):
        self.run = run
        self.tracking_uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not self.tracking_uri:
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            self.tracking_uri = "file://" + os.path.abspath(os.path.join(run.run_dir, "mlruns"))
        self.client = None
        self.run_id: str | None = None

    def _open(self, resume: bool) -> None:
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(self.tracking_uri)
        experiment = self.client.get_experiment_by_name(self.run.project)
        experiment_id = (
            experiment.experiment_id if experiment else self.client.create_experiment(self.run.project)
        )

        def new_run() -> str:
            created = self.client.create_run(experiment_id, run_name=self.run.experiment)
            if self.run.config:
                self.client.log_dict(created.info.run_id, self.run.config, "config.json")
            return created.info.run_id

        self.run_id = saved_run_id(self.run, "mlflow", resume, new_run)
        if resume:
            self.client.update_run(self.run_id, status="RUNNING")

    def rewind(self, step: int) -> None:
        self._open(resume=True)

    def archive_previous(self) -> None:
        self._open(resume=False)

    def log(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        if self.client is None:
            self._open(resume=False)
        now = int(time.time() * 1000)
        entries = [Metric(mlflow_key(k), float(v), now, step) for k, v in metrics.items()]
        for start in range(0, len(entries), MAX_BATCH):
            self.client.log_batch(self.run_id, metrics=entries[start : start + MAX_BATCH])

    def finish(self) -> None:
        if self.client is not None:
            self.client.set_terminated(self.run_id)
