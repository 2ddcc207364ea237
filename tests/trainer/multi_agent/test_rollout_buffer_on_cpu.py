"""CoMLRL's ``rollout_buffer_size`` / ``train_batch_size`` on CPU: one update per buffer of tasks, an epoch's
leftover tasks in one more, ceil(buffer / train_batch_size) optimizer steps per update (read from the
checkpoint's scheduler and Adam counters), baselines within each task's group, and two-turn tasks growing
CoMLRL's joint tree."""

from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from tests.conftest import start_local_ray
from verl_lite.trainer.multi_agent import IACConfig, IACTrainer, MAGRPOConfig, MAGRPOTrainer

# every joint answer of a task earns the task's value, so the rewards of one group are equal
TASKS = [{"prompt": f"Task {i}: say something.", "value": v} for i, v in enumerate((0.0, 1.0, 3.0))]


def reward_func(first, second, *, batch_items):
    return [batch_items[0]["value"] for _ in first]


def metrics_callback(rollouts):
    return {"task_value": rollouts[0].metadata["item"]["value"], "answers": float(len(rollouts))}


def settings(cls, tmp_path: Path, num_turns: int = 1, **kwargs):
    # two agents sharing one policy (one set of workers): each task brings it 2 prompt groups of 2 samples
    return cls(
        num_agents=2,
        num_turns=num_turns,
        num_train_epochs=1,
        num_generations=2,
        max_new_tokens=4,
        temperature=1.0,
        top_p=1.0,
        top_k=None,
        agent_learning_rate=1e-4,
        logging_steps=1,
        shared_policy=True,
        output_dir=str(tmp_path),
        **kwargs,
    )


def counters(part: Path, scratch: Path) -> tuple[int, set[int]]:
    """(scheduler steps, the Adam step count of every parameter) saved in checkpoint part ``part``."""
    flat = scratch / f"{part.parent.name}_{part.name}.pt"
    dcp_to_torch_save(part, flat)
    optim = torch.load(flat, weights_only=False)["optim"]["state"]
    scheduler = torch.load(part / "extra_rank0.pt", weights_only=False)["scheduler"]
    return scheduler["last_epoch"], {int(state["step"]) for state in optim.values()}


@pytest.fixture(scope="module")
def magrpo(tmp_path_factory):
    """3 tasks, rollout_buffer_size=2 and train_batch_size=1, evaluation before every task."""
    start_local_ray()
    path = tmp_path_factory.mktemp("magrpo_buffer")
    args = settings(
        MAGRPOConfig, path, rollout_buffer_size=2, train_batch_size=1, eval_interval=1, eval_num_samples=1
    )
    with MAGRPOTrainer(
        reward_func=reward_func,
        train_dataset=TASKS,
        eval_dataset=TASKS,
        args=args,
        metrics_callback=metrics_callback,
    ) as trainer:
        history = trainer.train(checkpoint_dir=str(path / "ckpts"))
    return trainer, history, path


def test_one_update_per_buffer_and_one_for_the_epochs_leftover_task(magrpo):
    trainer, history, _ = magrpo
    # 2 joint samples per task: tasks 1-2 in one update (env_step 4), task 3 alone at the epoch's end
    assert [(h["env_step"], h["task"]) for h in history] == [(4, 2.0), (6, 3.0)]
    # each update's rewards are those of its own tasks: values 0 and 1, then 3
    assert [h["turn_1/reward_mean"] for h in history] == [0.5, 3.0]
    # metrics_callback still sees one task at a time, logged at that task's env_step
    assert [(r["env_step"], r["task_value"], r["answers"]) for r in trainer.rollout_history] == [
        (2, 0.0, 4.0),
        (4, 1.0, 4.0),
        (6, 3.0, 4.0),
    ]


def test_evaluation_counts_tasks_inside_a_buffer(magrpo):
    trainer, _, _ = magrpo
    # eval_interval=1: before each of the 3 tasks, at the env_step it would have in a run of one task per update
    assert [e["env_step"] for e in trainer.eval_history] == [0, 2, 4]


def test_baselines_stay_within_each_tasks_group(magrpo):
    _, history, _ = magrpo
    # every task's rewards are equal, so its group baseline leaves 0; a baseline over the whole buffer
    # (rewards 0 and 1) would give the first update advantages of both signs
    for h in history:
        assert h["critic/advantages/max"] == 0.0 and h["critic/advantages/min"] == 0.0


def test_each_update_makes_one_optimizer_step_per_train_batch(magrpo, tmp_path):
    _, _, path = magrpo
    # train_batch_size=1: 2 steps on the full buffer, 1 on the leftover task; 2 updates in all
    scheduler_steps, adam_steps = counters(path / "ckpts" / "global_step_3" / "actor", tmp_path)
    assert scheduler_steps == 2
    assert adam_steps == {3}


def test_iac_actor_and_critic_step_per_train_batch(tmp_path):
    start_local_ray()
    with IACTrainer(
        reward_func=reward_func,
        train_dataset=TASKS[:2],
        args=settings(IACConfig, tmp_path, rollout_buffer_size=2, train_batch_size=1, eval_interval=0),
    ) as trainer:
        history = trainer.train(checkpoint_dir=str(tmp_path / "ckpts"))
    assert [(h["env_step"], h["task"]) for h in history] == [(4, 2.0)]
    step = tmp_path / "ckpts" / "global_step_2"
    # one update of the 2-task buffer, one optimizer step per task, for the actor and its critic alike
    assert counters(step / "actor", tmp_path) == (1, {2})
    assert counters(step / "critic", tmp_path) == (1, {2})


def test_two_turn_joint_trees_branch_per_joint_answer_cut_early_and_discount_returns(tmp_path):
    start_local_ray()
    seen, transitions = [], []

    def record(rollouts):
        seen.extend(rollouts)
        return {}

    def external_transition(prompt, agent_completions, num_agents, **histories):
        transitions.append((prompt, list(agent_completions), histories["response_history_per_agent"]))
        return [f"(after {prompt!r})"] * num_agents

    tasks = [
        {"prompt": "Task A: say something.", "value": 0.25},
        {"prompt": "Task B: say a word.", "value": 1.0},
    ]
    args = settings(
        MAGRPOConfig,
        tmp_path,
        num_turns=2,
        rollout_buffer_size=2,
        eval_interval=0,
        early_termination_threshold=0.5,
        discount=0.5,
    )
    with MAGRPOTrainer(
        reward_func=reward_func,
        train_dataset=tasks,
        args=args,
        external_transition=external_transition,
        metrics_callback=record,
    ) as trainer:
        [step] = trainer.train()
    # task A (mean reward 0.25 <= 0.5) branches: each of its 2 joint answers continues in a node of its own;
    # task B (mean 1.0 > 0.5) is cut after turn 1. env_steps: A 2 + 2 x 2, B 2
    assert (step["env_step"], step["task"]) == (8, 2.0)
    assert [p for p, _, _ in transitions] == [tasks[0]["prompt"]] * 2
    first_turn = [s for s in seen if s.metadata["item"] == tasks[0] and s.metadata["turn"] == 1]
    mine = [[s.completion for s in first_turn if s.agent_idx == i] for i in (0, 1)]
    for j, (_, answers, responses) in enumerate(transitions):
        # the transition gets joint answer j (answer j of each agent) and the branch's history, this turn's
        assert answers == [mine[0][j], mine[1][j]]
        assert responses == [[a] for a in answers]
    by_turn = {t: [s for s in seen if s.metadata["turn"] == t] for t in (1, 2)}
    assert len(by_turn[1]) == 2 * 2 * 2 and len(by_turn[2]) == 2 * 2 * 2  # B has no turn 2
    assert {s.prompt.endswith(f"(after {tasks[0]['prompt']!r})") for s in by_turn[2]} == {True}
    # returns: a leaf's is its reward; A's turn-1 answers 0.25 + 0.5 * 0.25; B's 1.0
    assert {s.metadata["reward"] for s in by_turn[2]} == {0.25}
    assert sorted({s.metadata["reward"] for s in by_turn[1]}) == [0.375, 1.0]
    assert step["turn_1/expected_return"] == pytest.approx((0.375 * 2 + 1.0 * 2) / 4)
    assert step["turn_2/expected_return"] == pytest.approx(0.25)
    assert step["turn_1/reward_mean"] == pytest.approx((0.25 * 2 + 1.0 * 2) / 4)
    # the returns are what the workers wrote on each trajectory's last token (16 trajectories)
    assert step["critic/score/mean"] == pytest.approx((0.375 * 4 + 0.25 * 8 + 1.0 * 4) / 16)
