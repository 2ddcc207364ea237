"""Multi-agent checkpoints with CoMLRL's ``train(resume_from_checkpoint=, checkpoint_dir=, ...)`` contract:
a MAGRPO run killed mid-epoch resumes from its last epoch checkpoint with every later metric unchanged and
its W&B run continued."""

import glob
import json
import os
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import start_local_ray
from tests.trainer.helpers import crashing_mode, joining, train
from tests.trainer.test_logging_on_cpu import read_wandb_history
from tests.trainer.test_resume_on_cpu import ROUNDING, _comparable
from verl_lite.trainer.checkpoint import COMPLETE_MARKER, complete_checkpoints
from verl_lite.trainer.multi_agent import MAGRPOConfig, MAGRPOTrainer, MAReMaxConfig, MAReMaxTrainer
from verl_lite.trainer.multi_agent.checkpointing import checkpoint_to_resume
from verl_lite.trainer.validation import EMBEDDED_DATA

TASK = Path(__file__).with_name("two_turn_task.py")

TASKS = [{"prompt": "Name a colour."}, {"prompt": "Name a fruit."}]


def reward_func(first, second):
    # the second agent is rewarded for answering at about the first one's length
    return [1.0 / (1.0 + abs(len(a) - len(b))) for a, b in zip(first, second)]


class CrashAfterTask3(MAGRPOTrainer):
    """Dies right after task 3 was trained and logged, as a killed run stops (mid-epoch 2)."""

    def train_step(self, epoch, index, items):
        metrics = super().train_step(epoch, index, items)
        if self.tasks_done == 3:
            raise RuntimeError("simulated crash after task 3")
        return metrics


def _run(trainer_cls, output_dir: Path, wandb_config: dict | None = None, **train_kwargs):
    """2 epochs of 2 tasks, two agents with a model each; evaluation before each epoch and at the end."""
    args = MAGRPOConfig(
        num_agents=2,
        num_turns=1,
        num_train_epochs=2,
        num_generations=2,
        max_new_tokens=6,
        # full-width sampling (CoMLRL's defaults, 0.6 / 0.6 / 50, are near greedy on the tiny model): the
        # answers depend on each request's sampling seed, so a resume that reseeds shows in the rewards
        temperature=1.0,
        top_p=1.0,
        top_k=None,
        agent_learning_rate=1e-4,
        eval_interval=2,
        eval_num_samples=1,
        logging_steps=1,
        rollout_buffer_size=1,  # an update per task
        output_dir=str(output_dir),
    )
    with trainer_cls(
        reward_func=reward_func,
        formatters=lambda item: item["prompt"],
        train_dataset=TASKS,
        eval_dataset=TASKS,
        args=args,
        wandb_config=wandb_config,
    ) as trainer:
        history = trainer.train(**train_kwargs)
        final = trainer.evaluate()
    return history, trainer.eval_history, final


def _logged(output_dir: Path) -> list[tuple[str, int]]:
    lines = (output_dir / "metrics.jsonl").read_text().splitlines()
    return [(json.loads(line)["kind"], json.loads(line)["env_step"]) for line in lines]


def test_a_killed_magrpo_run_resumes_from_its_epoch_checkpoint_with_every_later_metric_unchanged(tmp_path):
    start_local_ray()
    full_ckpts = tmp_path / "full_ckpts"
    full, full_evals, full_final = _run(
        MAGRPOTrainer, tmp_path / "full", checkpoint_dir=str(full_ckpts), checkpoint_total_limit=1
    )
    assert [h["task"] for h in full] == [1.0, 2.0, 3.0, 4.0]
    # a checkpoint after each epoch (tasks 2 and 4), the older pruned by checkpoint_total_limit=1
    assert [step for step, _ in complete_checkpoints(full_ckpts)] == [4]
    assert (full_ckpts / "global_step_4" / "policy_1" / "actor").is_dir()  # one part per agent's policy

    ckpts, out = tmp_path / "ckpts", tmp_path / "crashed"
    wandb_config = {"project": "verl-lite-test", "dir": str(tmp_path)}  # the crashed and the resumed run
    with pytest.raises(RuntimeError, match="simulated crash after task 3"):
        _run(CrashAfterTask3, out, wandb_config, checkpoint_dir=str(ckpts))
    assert [step for step, _ in complete_checkpoints(ckpts)] == [2]
    assert ("train", 6) in _logged(out)  # task 3 was logged before the crash

    resumed, evals, final = _run(
        MAGRPOTrainer, out, wandb_config, resume_from_checkpoint=True, checkpoint_dir=str(ckpts)
    )
    # tasks 1-2 come from the checkpoint; task 3 is redone from the epoch-1 checkpoint, then task 4
    assert [h["task"] for h in resumed] == [1.0, 2.0, 3.0, 4.0]
    for got, want in zip(resumed, full):
        got, want = _comparable(got), _comparable(want)
        assert got.keys() == want.keys()
        diff = {
            k: (got[k], want[k])
            for k in got
            if got[k] != want[k] and not (k in ROUNDING and abs(got[k] - want[k]) <= ROUNDING[k])
        }
        assert diff == {}, diff
    # evaluations before epochs 1 and 2 (env steps 0 and 4) and the final one: the same answers' rewards
    assert [e["env_step"] for e in evals] == [e["env_step"] for e in full_evals] == [0, 4, 8]
    assert evals == full_evals and final == full_final
    assert (ckpts / "global_step_4" / COMPLETE_MARKER).exists()
    # the crashed run's lines after its checkpoint were cut, so each is logged once
    assert _logged(out) == _logged(tmp_path / "full")

    # W&B offline writes each process's part to its own folder named after the run id: one id, two parts,
    # the second from the checkpoint on (task 3 again; a W&B history cannot be cut back like the jsonl).
    # run.finish() can return before W&B's service process has written the last records (seen under load:
    # the resumed part read back empty a moment before it held them), so the files are read until they
    # hold them, for at most 60 s.
    folders = glob.glob(str(tmp_path / "wandb" / "offline-run-*"))
    assert len(folders) == 2 and len({f.rsplit("-", 1)[1] for f in folders}) == 1, folders
    deadline = time.monotonic() + 60
    while True:
        logged = sorted(
            [r["env_step"] for r in read_wandb_history(run) if "turn_1/reward_mean" in r]
            for run in glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))
        )
        if logged == [[2, 4, 6], [6, 8]] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert logged == [[2, 4, 6], [6, 8]], (folders, logged)

    # another algorithm cannot continue it: refused before any worker starts
    remax = MAReMaxTrainer(reward_func=reward_func, train_dataset=TASKS, args=MAReMaxConfig(num_turns=1))
    with pytest.raises(
        ValueError, match=r"holds a run with a MAGRPOConfig of 2 agents; this one has a MAReMax"
    ):
        remax.train(resume_from_checkpoint=str(ckpts / "global_step_4"))
    assert remax._runtime is None


def test_bad_checkpoint_arguments_name_the_argument_and_what_is_valid(tmp_path):
    with pytest.raises(ValueError, match=r"checkpoint_interval=0 is not valid; use a positive integer"):
        checkpoint_to_resume(None, str(tmp_path), 0, None)
    with pytest.raises(ValueError, match=r"checkpoint_total_limit=True is not valid; use a positive"):
        checkpoint_to_resume(None, str(tmp_path), 1, True)
    with pytest.raises(ValueError, match=r"resume_from_checkpoint=True found no complete checkpoint under"):
        checkpoint_to_resume(True, str(tmp_path), 1, None)
    half = tmp_path / "global_step_2"
    half.mkdir()  # a save that never finished: no completion marker
    with pytest.raises(ValueError, match=r"global_step_2' is not a complete checkpoint"):
        checkpoint_to_resume(str(half), str(tmp_path), 1, None)
    assert checkpoint_to_resume(None, None, 3, 2) is None


# main_ppo trainer.mode=magrpo: 4 tasks per epoch, 2 tasks per update (data.train_batch_size), 2 epochs, 1 turn x
# 2 answers per agent, checkpoints every 2 updates; cross joint answers: the 2 x 2 combinations of the two
# agents' answers are each scored (4 env steps a task, 8 an update)
HYDRA = [
    "trainer.mode=magrpo",
    "multi_agent.joint_mode=cross",
    f"data.val_files={os.path.join(EMBEDDED_DATA, 'val.parquet')}",
    "data.train_batch_size=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "trainer.total_epochs=2",
    "trainer.total_training_steps=null",
    "trainer.save_freq=2",
    "actor_rollout_ref.rollout.n=2",
    "data.max_response_length=6",
    f"multi_agent.formatters=[{{path:{TASK},name:formatter}}]",
    f"multi_agent.reward_function.path={TASK}",
    "multi_agent.eval_interval=3",
    "multi_agent.eval_num_samples=1",
]


def test_the_magrpo_mode_resumes_a_killed_run_with_the_same_metrics(tmp_path, cluster):
    tasks = tmp_path / "tasks4.parquet"
    pd.read_parquet(os.path.join(EMBEDDED_DATA, "train.parquet")).head(4).to_parquet(tasks)
    common = [*joining(cluster), f"data.train_files={tasks}", *HYDRA]
    full = train(tmp_path / "full", *common)
    crash = tmp_path / "crash_mode.py"
    crash.write_text(
        crashing_mode(
            "magrpo_crash_after_3", "verl_lite.trainer.multi_agent.trainer_magrpo", "MAGRPOModeTrainer", 3
        )
    )
    run_dir = tmp_path / "crashed"
    with pytest.raises(Exception, match="simulated crash after step 3"):
        train(run_dir, *common, f"trainer.extensions=[{crash}]", "trainer.mode=magrpo_crash_after_3")
    ckpts = run_dir / "grpo_tiny" / "checkpoints"
    assert [step for step, _ in complete_checkpoints(ckpts)] == [2]
    resumed = train(run_dir, *common)  # trainer.resume_mode=auto is the default

    # training logs after each update (8 env steps); evaluations before the tasks of each epoch's start
    # and every 3 tasks (tasks 0, 3, 4 and 6), each at the env step its task starts at: task 3 is the second
    # of update 2, so its evaluation (run before that update) is logged at 8 + 4
    steps = [0, 8, 12, 16, 16, 24, 24, 32]
    assert [h["step"] for h in full] == steps
    trained = [h for h in full if "turn_1/reward_mean" in h]
    assert [h["task"] for h in trained] == [2.0, 4.0, 6.0, 8.0]
    assert [h["epoch"] for h in trained] == [0.0, 0.0, 1.0, 1.0]
    for h in trained:  # cross: each answer's return sums the 2 combinations it is in
        assert h["critic/score/mean"] == pytest.approx(2 * h["turn_1/reward_mean"], abs=1e-5)
    assert [_comparable(h) for h in resumed] == [_comparable(h) for h in full]
    logged = [json.loads(line)["step"] for line in (run_dir / "grpo_tiny" / "metrics.jsonl").open()]
    assert logged == steps  # the crashed run's update 3 was dropped, not duplicated
    assert [step for step, _ in complete_checkpoints(ckpts)] == [2, 4]
