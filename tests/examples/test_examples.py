"""Every file under examples/ runs: self-checking scripts as scripts, extensions through main_ppo."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

# script -> a line its self-check prints when it passed
SCRIPTS = {
    "custom_loss_and_estimator.py": "group_median advantages: [1.0, 0.0, 0.0, 0.0, 0.0, -1.0]",
    "custom_reward.py": "[1.2, 1.0, 0.0]",  # batch form: the shorter correct answer gets the 0.2 bonus
    "custom_rollout.py": "plain == hf on 2 greedy requests",
    "single_controller_demo.py": "2 * x  : [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0]",
}
# files loaded by trainer.extensions in test_extension_examples_train_through_main_ppo
EXTENSIONS = [
    "custom_agent_loop.py",
    "custom_loss_and_estimator.py",
    "custom_rollout.py",
    "custom_trainer_mode.py",
]
TESTED_ELSEWHERE = {
    "data_preprocess/gsm8k.py": "tests/data/test_gsm8k_preprocess.py",
    "multi_agent_length_ratio.py": "tests/trainer/multi_agent/test_magrpo_on_cpu.py",
}


def test_every_example_file_is_exercised_by_a_test():
    files = {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.py")}
    assert files == set(SCRIPTS) | set(EXTENSIONS) | set(TESTED_ELSEWHERE)


def test_example_paths_named_in_the_docs_exist():
    text = "".join(path.read_text() for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
    named = set(re.findall(r"(?<![\w/])examples/[\w/]+\.py", text))
    assert named and not [path for path in named if not (ROOT / path).exists()]


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_example_script_runs_its_self_check(script):
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert SCRIPTS[script] in result.stdout


def test_extension_examples_train_through_main_ppo(tmp_path):
    """One 2-step run that uses the custom loss, estimator, rollout server, agent loop, trainer mode and reward.

    It runs the command line in a child process, so the example registrations stay out of this one.
    """
    rollout_log = tmp_path / "rollout.jsonl"
    bonus = 10.0
    overrides = [
        "data.train_batch_size=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.rollout.n=4",
        # answer_twice gives its first answer half of this: room for the tiny model's ~20-token answers
        "data.max_response_length=64",
        "trainer.total_training_steps=2",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.logger=[jsonl]",
        f"trainer.run_dir={tmp_path}",
        f"hydra.run.dir={tmp_path / 'hydra'}",
        "ray_kwargs.ray_init.num_cpus=8",
        f"+ray_kwargs.ray_init.runtime_env.env_vars.PLAIN_ROLLOUT_LOG={rollout_log}",
        "trainer.extensions=[{}]".format(",".join(str(EXAMPLES / name) for name in EXTENSIONS)),
        "actor_rollout_ref.actor.policy_loss=tanh_clipped",
        "algorithm.adv_estimator=group_median",
        "actor_rollout_ref.rollout.name=plain",
        "actor_rollout_ref.rollout.agent.default_agent_loop=answer_twice",
        "trainer.mode=score_ema",
        f"reward.custom_reward_function.path={EXAMPLES / 'custom_reward.py'}",
        f"+reward.reward_kwargs.length_bonus={bonus}",
    ]
    result = subprocess.run(
        [sys.executable, "-m", "verl_lite.main_ppo", *overrides],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = (tmp_path / "grpo_tiny" / "metrics.jsonl").read_text().splitlines()
    history = [json.loads(line) for line in metrics]

    assert [h["step"] for h in history] == [1, 2]
    first, second = history
    # loss: a metric only tanh_clipped emits
    assert first["actor/tanh_clipped_used"] == second["actor/tanh_clipped_used"] == 1.0
    # reward: a correct (short) answer scores 1 + bonus, a wrong one 0, so score = (1 + bonus) * accuracy;
    # the tiny model starts at about 25 % accuracy, so 16 samples contain correct ones
    for h in history:
        assert h["critic/score/mean"] == pytest.approx((1 + bonus) * h["critic/acc/mean"])
    assert first["critic/acc/mean"] + second["critic/acc/mean"] > 0
    # estimator: score minus the group median is 0 or +-(1 + bonus); grpo would normalise by the std
    for h in history:
        assert {h["critic/advantages/max"], h["critic/advantages/min"]} <= {-(1 + bonus), 0.0, 1 + bonus}
    # trainer mode: ema_1 = s_1, ema_2 = 0.9 s_1 + 0.1 s_2
    s1, s2 = first["critic/score/mean"], second["critic/score/mean"]
    assert first["trainer_mode/score_ema"] == pytest.approx(s1)
    assert second["trainer_mode/score_ema"] == pytest.approx(0.9 * s1 + 0.1 * s2)
    # rollout: the plain server answered every request of the training samples (the answer_twice loop asks
    # once or twice per sample) and of the final greedy validation, got new weights between the steps,
    # and its log-probs are the ones the actor recomputes on the model's tokens (the nudge is masked)
    calls = [json.loads(line) for line in rollout_log.read_text().splitlines()]
    train_calls = [c for c in calls if not c["greedy"]]
    assert 2 * 2 * 4 <= len(train_calls) <= 2 * 2 * 4 * 2
    assert {c["weight_version"] for c in train_calls} == {-1, 1}
    assert any(c["greedy"] for c in calls)
    assert all(h["training/rollout_probs_diff_mean"] < 1e-4 for h in history)
    # agent loop: one turn when the first answer was cut, three (answer, nudge, answer) otherwise
    for h in history:
        assert 1 <= h["agent/num_turns/min"] and h["agent/num_turns/max"] <= 3
