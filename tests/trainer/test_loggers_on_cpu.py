"""Loggers through main_ppo: MLflow's local file store and a custom logger from trainer.extensions read
back against the returned metrics, and a W&B run continued under its id after resume_mode=auto."""

import glob
import json
import os

import pytest

from tests.trainer.helpers import joining, train
from tests.trainer.test_logging_on_cpu import read_wandb_history

# A logger registered by an extension file: each step's metrics as one json line in the run folder.
RECORDING_LOGGER = """
import json, os
from verl_lite.trainer.loggers import register_logger

@register_logger("recording")
class RecordingLogger:
    def __init__(self, run):
        self.file = open(os.path.join(run.run_dir, "recorded.jsonl"), "a")

    def log(self, metrics, step):
        self.file.write(json.dumps({"step": step, **metrics}) + "\\n")

    def finish(self):
        self.file.close()
"""


def test_mlflow_and_an_extension_logger_record_every_step(tmp_path, cluster, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    extension = tmp_path / "recording_logger.py"
    extension.write_text(RECORDING_LOGGER)
    history = train(
        tmp_path,
        *joining(cluster),
        "trainer.total_training_steps=2",
        "trainer.logger=[console,mlflow,recording]",
        f"trainer.extensions=[{extension}]",
        "trainer.project_name=logged",
    )
    by_step = {h["step"]: h for h in history}
    run_dir = tmp_path / "grpo_tiny"
    recorded = [json.loads(line) for line in (run_dir / "recorded.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recorded] == [1, 2]
    assert all(r == pytest.approx(by_step[r["step"]]) for r in recorded)

    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 reads its file store only when asked
    client = MlflowClient(f"file://{run_dir / 'mlruns'}")
    experiment = client.get_experiment_by_name("logged")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "grpo_tiny" and run.info.status == "FINISHED"
    assert run.info.run_id == (run_dir / "mlflow_run_id").read_text()
    scores = client.get_metric_history(run.info.run_id, "critic/score/mean")
    assert {m.step: m.value for m in scores} == pytest.approx(
        {s: by_step[s]["critic/score/mean"] for s in (1, 2)}
    )
    assert "timing_s/step" in run.data.metrics


def test_wandb_resume_continues_the_same_run_id(tmp_path, cluster, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    common = [*joining(cluster), "trainer.logger=[console,wandb]", "trainer.save_freq=1"]
    train(tmp_path, *common, "trainer.total_training_steps=1")
    resumed = train(tmp_path, *common, "trainer.total_training_steps=2")  # resume_mode=auto: after step 1
    assert resumed[-1]["step"] == 2
    run_dir = tmp_path / "grpo_tiny"
    folders = sorted(glob.glob(str(run_dir / "wandb" / "offline-run-*")))
    run_id = (run_dir / "wandb_run_id").read_text()
    assert len(folders) == 2 and all(f.endswith(f"-{run_id}") for f in folders)
    (second,) = glob.glob(os.path.join(folders[1], "run-*.wandb"))
    logged = [r["_step"] for r in read_wandb_history(second) if "critic/score/mean" in r]
    assert logged == [2]
