"""End to end on CPU: main_ppo's config → TaskRunner → workers → a few real training steps."""

import json
import os
import time

import pytest
import ray

from tests.trainer.conftest import suite_cluster
from tests.trainer.helpers import joining, train, train_cli


@pytest.fixture(scope="module")
def three_steps(tmp_path_factory):
    """The default GRPO run (hybrid hf rollout, FAST settings) for 3 steps: its folder and step metrics."""
    run_dir = tmp_path_factory.mktemp("three_steps")
    return run_dir, train(run_dir, *joining(suite_cluster()), "trainer.total_training_steps=3")


def test_grpo_three_steps_with_hf_rollout(three_steps):
    run_dir, history = three_steps
    steps = [h for h in history if h["step"] > 0]
    assert [h["step"] for h in steps] == [1, 2, 3]
    for h in steps:
        assert 0.0 <= h["critic/score/mean"] <= 1.0 and h["actor/grad_norm"] > 0
        assert h["training/rollout_probs_diff_mean"] < 1e-4
        assert h["kv/controller_bytes_read"] == 0  # the controller never read a token tensor
    lines = (run_dir / "grpo_tiny" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2, 3]


def test_ppo_with_gae_and_a_critic_two_steps(tmp_path, cluster):
    history = train(
        tmp_path,
        *joining(cluster),
        "trainer.total_training_steps=2",
        "algorithm.adv_estimator=gae",
        "algorithm.lam=0.95",
        "critic.critic.optim.warmup_steps=1",
        "trainer.experiment_name=ppo",
        # hybrid with an agent-loop actor of its own (by default the servers' processes run the loops)
        "actor_rollout_ref.rollout.agent.num_workers=1",
    )
    last = history[-1]
    assert last["step"] == 2 and "critic/vf_loss" in last and "critic/values/mean" in last
    assert "critic/vf_explained_var" in last


def test_failing_custom_reward_is_counted_and_the_run_completes(tmp_path, cluster):
    reward = tmp_path / "flaky_reward.py"
    reward.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    if extra_info and extra_info.get('index', 0) % 2:\n"
        "        raise RuntimeError('judge offline')\n"
        "    return 1.0 if ground_truth in solution_str else 0.0\n"
    )
    history = train(
        tmp_path,
        *joining(cluster),
        "trainer.total_training_steps=2",
        f"reward.custom_reward_function.path={reward}",
        "reward.custom_reward_function.name=compute_score",
    )
    assert [h["step"] for h in history] == [1, 2]
    assert sum(h["rollout_failure/evicted"] for h in history) > 0


def test_always_raising_reward_stops_the_run_within_one_step_with_its_message(tmp_path, cluster, capsys):
    reward = tmp_path / "dead_judge.py"
    reward.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    raise ConnectionError('judge at http://judge:8000 refused the connection')\n"
    )
    start = time.monotonic()
    code, line = train_cli(
        tmp_path,
        capsys,
        *joining(cluster),
        "trainer.total_training_steps=3",
        f"reward.custom_reward_function.path={reward}",
        "trainer.sample_timeout_s=600",
        "reward.max_failure_fraction=1.0",
        "reward.failure_window=16",  # 4 prompts a round: the initial batch and 3 refills
        "trainer.replay_buffer.max_refill_batches=8",  # 32 replacements: the window fills first
    )
    elapsed = time.monotonic() - start
    print(f"the always-raising scorer ended the run after {elapsed:.1f} s")
    # the user reads the controller's own sentence and exit code, not Ray's traceback around it
    assert code == 3
    assert line.startswith(
        "verl_lite: the run stopped: scoring failed for 16 of the last 16 prompt groups at global step 1"
    ), line
    assert line.endswith(
        "for data_source='synthetic_arith': ConnectionError: judge at http://judge:8000 refused the connection"
    ), line
    assert elapsed < 600 / 4  # stopped by the failure window, not by trainer.sample_timeout_s


def test_two_node_cluster_runs_actor_dp2_across_nodes(tmp_path):
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 2, "object_store_memory": 300 * 1024**2}
    )
    cluster.add_node(num_cpus=2, object_store_memory=300 * 1024**2)
    try:
        history = train(
            tmp_path,
            "trainer.total_training_steps=2",
            "trainer.nnodes=2",
            "trainer.n_gpus_per_node=1",
            *joining(cluster),
            own_ray=True,  # main_ppo joins the two-node cluster itself, not the suite's one-node Ray
        )
        assert [h["step"] for h in history] == [1, 2]
        assert all(h["kv/controller_bytes_read"] == 0 for h in history)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


def test_val_only_validates_once_and_trains_nothing(tmp_path, cluster):
    import pandas as pd

    from verl_lite.trainer.validation import EMBEDDED_DATA

    val = tmp_path / "val8.parquet"
    pd.read_parquet(os.path.join(EMBEDDED_DATA, "val.parquet")).head(8).to_parquet(val)
    history = train(tmp_path, *joining(cluster), "trainer.val_only=true", f"data.val_files={val}")
    assert len(history) == 1 and history[0]["step"] == 0
    assert 0.0 <= history[0]["val-core/synthetic_arith/acc/mean@1"] <= 1.0
    assert not any(key.startswith("actor/") for key in history[0])


def test_skipping_the_old_log_prob_pass_leaves_the_update_unchanged(tmp_path, cluster, three_steps):
    # FAST is one on-policy pass (one epoch, one mini-batch): auto (the default run's first step) skips
    # the separate forward; the same first step with it recomputed must train the same.
    skipped = three_steps[1][0]
    recomputed = train(
        tmp_path,
        *joining(cluster),
        "trainer.total_training_steps=1",
        "actor_rollout_ref.actor.old_log_prob=recompute",
    )[-1]
    assert "timing_s/old_log_prob" not in skipped and "timing_s/old_log_prob" in recomputed
    for key in (
        "critic/score/mean",
        "actor/pg_loss",
        "actor/grad_norm",
        "actor/entropy",
        "actor/pg_clipfrac",
    ):
        assert skipped[key] == pytest.approx(recomputed[key], rel=1e-4, abs=1e-7), key
    assert skipped["training/rollout_probs_diff_mean"] < 1e-4


def test_remax_subtracts_each_prompts_greedy_score_two_steps(tmp_path, cluster):
    # The reward is the prompt's index parity, whatever the response says: every sample of a prompt
    # scores exactly what its greedy response scores, so ReMax's advantages are all 0 while the
    # baselines differ between prompts. A missing, mis-aligned or differently scored baseline
    # would leave advantages of +-1.
    reward = tmp_path / "parity_reward.py"
    reward.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return float(extra_info['index'] % 2)\n"
    )
    history = train(
        tmp_path,
        *joining(cluster),
        "trainer.total_training_steps=2",
        "algorithm.adv_estimator=remax",
        "actor_rollout_ref.rollout.n=2",
        f"reward.custom_reward_function.path={reward}",
        "reward.custom_reward_function.name=compute_score",
    )
    assert [h["step"] for h in history] == [1, 2]
    assert any(h["critic/remax_baseline/max"] > h["critic/remax_baseline/min"] for h in history)
    for h in history:
        assert 0.0 <= h["critic/remax_baseline/mean"] <= 1.0
        assert h["critic/remax_baseline/mean"] == pytest.approx(h["critic/score/mean"])
        assert h["critic/advantages/max"] == h["critic/advantages/min"] == 0.0
        assert h["kv/controller_bytes_read"] == 0
