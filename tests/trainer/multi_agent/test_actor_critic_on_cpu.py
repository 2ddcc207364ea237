"""IAC (a critic per agent) and MAAC (one centralised critic) end to end on CPU, in one Ray instance."""

import json

import pytest

from tests.conftest import start_local_ray
from verl_lite.trainer.multi_agent import IACConfig, IACTrainer, MAACConfig, MAACTrainer

TASKS = [{"prompt": f"Task {i}: say something.", "target": 2.0} for i in range(2)]


def reward_func(first, second, *, batch_items):
    # the second agent should write about `target` times as much as the first
    target = batch_items[0]["target"]
    return [1.0 / (1.0 + abs(len(b) / max(len(a), 1) - target)) for a, b in zip(first, second)]


def metrics_callback(rollouts):
    if not rollouts:
        return {}
    return {
        "response_chars": sum(len(s.completion) for s in rollouts) / len(rollouts),
        "agents_seen": float(len({s.agent_idx for s in rollouts})),
    }


def settings(cls, tmp_path):
    # IAC also turns the reference KL on (its metrics are checked below)
    return cls(
        reference_kl_enabled=cls is IACConfig,
        reference_kl_coef=0.01,
        num_agents=2,
        num_turns=1,
        num_train_epochs=1,
        num_generations=4,
        max_new_tokens=8,
        agent_learning_rate=1e-4,
        eval_interval=0,
        eval_num_samples=1,
        logging_steps=1,
        rollout_buffer_size=1,  # an update per task
        output_dir=str(tmp_path),
    )


def _kinds(path) -> list[str]:
    return [json.loads(line)["kind"] for line in (path / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One IAC and one MAAC run (2 tasks x 4 joint samples, two models) and a manual evaluate() each."""
    start_local_ray()
    out = {}
    for name, trainer_cls, config_cls in (
        ("iac", IACTrainer, IACConfig),
        ("maac", MAACTrainer, MAACConfig),
    ):
        path = tmp_path_factory.mktemp(name)
        with trainer_cls(
            agent_model=None,
            num_agents=2,
            reward_func=reward_func,
            train_dataset=TASKS,
            eval_dataset=TASKS,
            args=settings(config_cls, path),
            metrics_callback=metrics_callback,
        ) as trainer:
            history = trainer.train(checkpoint_dir=str(path / "ckpts"))
            evaluation = trainer.evaluate()
            critics = {id(a.groups.critic) for a in trainer._loop.agents}
            logged = _kinds(path)
            # the epoch's checkpoint loads back into these workers (critics too) and restores the progress
            trainer.load_checkpoint(str(path / "ckpts" / "global_step_2"))
            restored = (list(trainer.history), list(trainer.eval_history), trainer.env_step)
        out[name] = {
            "history": history,
            "eval": evaluation,
            "trainer": trainer,
            "path": path,
            "critics": critics,
            "restored": restored,
            "logged": logged,
        }
    return out


def test_iac_trains_one_critic_per_agent(runs):
    run = runs["iac"]
    assert len(run["critics"]) == 2
    assert [h["env_step"] for h in run["history"]] == [4, 8]
    for h in run["history"]:
        for k in (0, 1):  # each policy's own value loss and GAE returns
            assert f"policy_{k}/critic/vf_loss" in h
            assert f"policy_{k}/critic/returns/mean" in h
        assert 0.0 < h["turn_1/reward_mean"] <= 1.0
        # CoMLRL's reference KL: a penalty on each answer's reward, so the reward after it is lower
        assert h["policy_0/actor/reward_kl_penalty/mean"] >= 0.0
        assert h["policy_0/critic/rewards/mean"] <= h["policy_0/critic/score/mean"]
    assert "reward_kl_penalty" not in str(runs["maac"]["history"])  # off without reference_kl_enabled


def test_maac_trains_one_centralised_critic_on_every_agents_answers(runs):
    run = runs["maac"]
    assert len(run["critics"] - {id(None)}) == 1
    for h in run["history"]:
        assert "critic/vf_loss" in h  # one critic update over both agents' answers
        assert not any(k.endswith("critic/vf_loss") and k.startswith("policy_") for k in h)
        assert "policy_1/critic/returns/mean" in h


@pytest.mark.parametrize("name", ["iac", "maac"])
def test_a_checkpoint_holds_every_critic_and_restores_the_progress_before_evaluate(runs, name):
    run = runs[name]
    step = run["path"] / "ckpts" / "global_step_2"
    parts = sorted(str(p.relative_to(step)) for p in step.glob("policy_*/*") if p.is_dir())
    # IAC: a critic per policy; MAAC: the one centralised critic, in the first policy's processes
    critics = ["policy_0/critic", "policy_1/critic"] if name == "iac" else ["policy_0/critic"]
    assert parts == sorted(["policy_0/actor", "policy_1/actor", *critics])
    # the manual evaluate() came after the checkpoint: loading it drops that evaluation again
    assert run["restored"] == (run["history"], [], 8)
    assert run["logged"][-1] == "eval" and _kinds(run["path"]) == run["logged"][:-1]


@pytest.mark.parametrize("name", ["iac", "maac"])
def test_metrics_callback_runs_in_training_and_evaluation(runs, name):
    run = runs[name]
    trainer = run["trainer"]
    # training: logged every task at rollout time, over both agents' 4 answers each
    assert [r["env_step"] for r in trainer.rollout_history] == [4, 8]
    assert all(r["agents_seen"] == 2.0 for r in trainer.rollout_history)
    # evaluation: eval_num_samples=1 task, averaged over items and prefixed
    assert set(run["eval"]) == {
        "eval/turn_1/reward_mean",
        "eval/turn_1/expected_return",
        "eval/response_chars",
        "eval/agents_seen",
    }
    [saved] = list((run["path"] / "eval").glob("env_step_8.json"))
    assert len(json.loads(saved.read_text())["batch_items"]) == 1
    kinds = run["logged"]  # before the checkpoint was loaded back
    # eval_interval=0: no evaluation during training, only the manual evaluate() at the end
    assert kinds.count("rollout") == 2 and kinds.count("train") == 2 and kinds.count("eval") == 1
    assert kinds[-1] == "eval"
