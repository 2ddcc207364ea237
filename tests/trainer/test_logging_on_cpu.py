"""What a run leaves behind: jsonl, tensorboard, offline wandb and MLflow logs, a custom logger's records,
generation dumps, the reward curve.

One short real run writes everything; each logger's output is read back and checked against the
metrics the trainer returned.
"""

import glob
import json
import os
import struct

import pandas as pd
import pytest

from tests.trainer.helpers import train
from verl_lite.trainer.validation import EMBEDDED_DATA

# The .wandb file is a LevelDB-style log: 32 KiB blocks of records with a 7-byte header each
# (crc32, length, kind: 1 full, 2 first, 3 middle, 4 last) after a 7-byte file header.
WANDB_BLOCK = 32768

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


def read_wandb_history(run_file: str) -> list[dict]:
    """The ``history`` records (what ``wandb.log`` sent) of an offline run file."""
    from wandb.proto import wandb_internal_pb2

    raw = open(run_file, "rb").read()
    assert raw[:4] == b":W&B"
    pos, chunks, records = 7, b"", []
    while pos + 7 <= len(raw):
        room = WANDB_BLOCK - pos % WANDB_BLOCK
        if room < 7:
            pos += room
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos : pos + 7])
        if length == 0 and kind == 0:
            break
        chunks += raw[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            chunks = b""
            if record.WhichOneof("record_type") == "history":
                records.append(
                    {
                        item.key or "/".join(item.nested_key): json.loads(item.value_json)
                        for item in record.history.item
                    }
                )
    return records


def read_tensorboard(log_dir: str) -> dict[str, dict[int, float]]:
    """``{tag: {step: value}}`` of every scalar in a tensorboard log folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(log_dir, size_guidance={"scalars": 0})
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in open(path)]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("logging")
    val = tmp_path / "val8.parquet"
    pd.read_parquet(os.path.join(EMBEDDED_DATA, "val.parquet")).head(8).to_parquet(val)
    extension = tmp_path / "recording_logger.py"
    extension.write_text(RECORDING_LOGGER)
    with pytest.MonkeyPatch.context() as env:
        env.delenv("MLFLOW_TRACKING_URI", raising=False)  # MLflow's store: the run folder's mlruns/
        history = train(
            tmp_path,
            "trainer.total_training_steps=2",
            "trainer.logger=[console,jsonl,tensorboard,wandb,mlflow,recording]",
            f"trainer.extensions=[{extension}]",
            "trainer.project_name=logged",
            "trainer.val_before_train=true",
            f"data.val_files={val}",
            "actor_rollout_ref.rollout.val_kwargs.n=2",
            "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
            "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
            f"trainer.rollout_data_dir={tmp_path / 'rollouts'}",
            f"trainer.validation_data_dir={tmp_path / 'validation'}",
        )
    return tmp_path, {h["step"]: h for h in history}


def test_jsonl_holds_every_step_and_validation(finished_run):
    tmp_path, by_step = finished_run
    lines = read_jsonl(tmp_path / "grpo_tiny" / "metrics.jsonl")
    assert [line["step"] for line in lines] == [0, 1, 2]
    assert lines[0].keys() >= {f"val-core/synthetic_arith/acc/{k}@2" for k in ("mean", "best", "maj")}
    for line in lines[1:]:
        assert line == pytest.approx(by_step[line["step"]])
        assert {"critic/score/mean", "actor/pg_loss", "timing_s/gen", "perf/throughput"} <= line.keys()
        assert 0 < line["timing_s/reward"] < line["timing_s/gen"]  # scoring runs inside generation


def test_tensorboard_scalars_match_the_metrics(finished_run):
    tmp_path, by_step = finished_run
    scalars = read_tensorboard(str(tmp_path / "grpo_tiny" / "tensorboard"))
    assert scalars["critic/score/mean"] == pytest.approx({s: by_step[s]["critic/score/mean"] for s in (1, 2)})
    assert set(scalars["val-core/synthetic_arith/acc/mean@2"]) == {0, 2}


def test_offline_wandb_run_records_the_metrics(finished_run):
    tmp_path, by_step = finished_run
    run_files = glob.glob(str(tmp_path / "grpo_tiny" / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(run_files) == 1
    logged = {r["_step"]: r for r in read_wandb_history(run_files[0]) if "critic/score/mean" in r}
    assert sorted(logged) == [1, 2]
    for step, record in logged.items():
        assert record["critic/score/mean"] == pytest.approx(by_step[step]["critic/score/mean"])


def test_mlflow_and_an_extension_logger_record_every_step(finished_run, monkeypatch):
    tmp_path, by_step = finished_run
    run_dir = tmp_path / "grpo_tiny"
    recorded = [json.loads(line) for line in (run_dir / "recorded.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recorded] == [0, 1, 2]  # validation before training, then each step
    assert all(r == pytest.approx(by_step[r["step"]]) for r in recorded[1:])

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


def test_rollout_and_validation_dumps(finished_run):
    tmp_path, by_step = finished_run
    assert sorted(os.listdir(tmp_path / "rollouts")) == ["1.jsonl", "2.jsonl"]
    for step in (1, 2):
        rows = read_jsonl(tmp_path / "rollouts" / f"{step}.jsonl")
        assert len(rows) == 4 * 4  # prompts x rollout.n
        assert all(r["step"] == step and r["prompt"] and r["ground_truth"] is not None for r in rows)
        assert all(isinstance(r["response"], str) and r["data_source"] == "synthetic_arith" for r in rows)
        assert sum(r["score"] for r in rows) / len(rows) == pytest.approx(by_step[step]["critic/score/mean"])
    assert sorted(os.listdir(tmp_path / "validation")) == ["0.jsonl", "2.jsonl"]
    rows = read_jsonl(tmp_path / "validation" / "2.jsonl")
    assert len(rows) == 8 * 2 and len({r["uid"] for r in rows}) == 8
    mean_acc = sum(r["acc"] for r in rows) / len(rows)
    assert mean_acc == pytest.approx(by_step[2]["val-core/synthetic_arith/acc/mean@2"])


def test_reward_curve_is_drawn(finished_run):
    tmp_path, _ = finished_run
    curve = tmp_path / "grpo_tiny" / "reward_curve.png"
    assert curve.exists() and curve.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
