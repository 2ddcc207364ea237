"""The tracker and its loggers: the jsonl log across runs of one folder, the registry, run ids kept for a resume."""

import json

import pytest

from verl_lite.trainer.loggers import LOGGERS, RunInfo, register_logger, saved_run_id
from verl_lite.trainer.loggers.mlflow_logger import mlflow_key
from verl_lite.trainer.tracking import Tracker, bar_label


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
    with pytest.raises(ValueError, match=r"trainer.logger has unknown entries \['mlfow'\]"):
        Tracker(["console", "mlfow"], "/tmp/unused", "p", "e")


def test_a_registered_logger_receives_every_step_and_the_resume_hooks(tmp_path, monkeypatch):
    # a private copy of the table, so the name is gone after the test (other tests list every logger)
    monkeypatch.setattr(LOGGERS, "_entries", dict(LOGGERS._entries))
    seen = []

    @register_logger("test_recording")
    class Recording:
        def __init__(self, run):
            seen.append(("init", run.project, run.experiment))

        def log(self, metrics, step):
            seen.append((step, metrics))

        def rewind(self, step):
            seen.append(("rewind", step))

        def finish(self):
            seen.append("finish")

    tracker = Tracker(["test_recording", "jsonl"], str(tmp_path), "p", "e")
    tracker.rewind(1)
    tracker.log({"x": 1.0}, step=2)
    tracker.finish([])
    assert seen == [("init", "p", "e"), ("rewind", 1), (2, {"x": 1.0}), "finish"]


def test_mlflow_keys_keep_slashes_and_spell_refused_characters():
    assert mlflow_key("val-core/openai/gsm8k/acc/maj@4") == "val-core/openai/gsm8k/acc/maj_at_4"
    assert mlflow_key("a(b)+c") == "a_b__c"


def test_a_run_id_is_kept_for_a_resume_and_replaced_on_a_fresh_start(tmp_path):
    run = RunInfo(str(tmp_path), "p", "e")
    ids = iter(["first", "second"])
    assert saved_run_id(run, "svc", resume=False, new_id=lambda: next(ids)) == "first"
    assert saved_run_id(run, "svc", resume=True, new_id=lambda: next(ids)) == "first"
    assert saved_run_id(run, "svc", resume=False, new_id=lambda: next(ids)) == "second"


def test_the_bar_names_validation_metrics_by_their_whole_data_source():
    # data sources with a slash stay apart instead of collapsing to their first part
    assert bar_label("val-core/openai/gsm8k/acc/mean@1") == "openai/gsm8k mean@1"
    assert bar_label("val-core/reasoning_gym/leg_counting/acc/maj@4") == "reasoning_gym/leg_counting maj@4"
    assert bar_label("val-core/synthetic_arith/acc/mean@1") == "synthetic_arith mean@1"


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("history", [[], [{"step": 1, "timing_s/step": 0.5}]], ids=["nothing", "no_reward"])
def test_a_reward_curve_without_rewards_is_drawn_without_a_warning(tmp_path, history):
    from verl_lite.trainer.summary import write_reward_curve

    write_reward_curve(history, str(tmp_path / "curve.png"))
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
