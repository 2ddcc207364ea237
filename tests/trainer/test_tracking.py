"""The jsonl log across runs of one folder: a resume rewinds it, a fresh start moves the old one aside."""

import json

import pytest

from verl_lite.trainer.tracking import Tracker


def steps_in(path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_rewind_drops_the_steps_about_to_be_redone(tmp_path):
    tracker = Tracker(["jsonl"], str(tmp_path), "p", "e")
    for step in (0, 1, 2, 3):
        tracker.log({"critic/score/mean": step / 4}, step=step)
    tracker.rewind(2)
    tracker.log({"critic/score/mean": 0.9}, step=3)
    tracker.finish([])
    assert steps_in(tmp_path / "metrics.jsonl") == [0, 1, 2, 3]
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])["critic/score/mean"] == 0.9


def test_a_fresh_start_keeps_the_previous_log_beside_the_new_one(tmp_path):
    first = Tracker(["jsonl"], str(tmp_path), "p", "e")
    first.log({"x": 1.0}, step=1)
    first.finish([])
    second = Tracker(["jsonl"], str(tmp_path), "p", "e")
    archived = second.archive_previous()
    second.log({"x": 2.0}, step=1)
    second.finish([])
    assert archived and steps_in(tmp_path / archived.rsplit("/", 1)[-1]) == [1]
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 1
    assert Tracker(["console"], str(tmp_path), "p", "e").archive_previous() is None


def test_unknown_logger_is_named():
    with pytest.raises(ValueError, match=r"trainer.logger has unknown entries \['mlflow'\]"):
        Tracker(["console", "mlflow"], "/tmp/unused", "p", "e")
