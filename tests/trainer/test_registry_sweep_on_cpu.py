"""Every registered estimator, loss, aggregation, KL estimator, reward manager and scorer trains through main_ppo.

Each row is one short real run that sets many names and keys at once (so the sweep stays a few
minutes on 2 cores) and checks the effect of what it sets where the effect shows in the metrics.
The rows share one Ray cluster; each run joins it and its actors end with the run.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import ray

from tests.trainer.helpers import train
from verl_lite.trainer.validation import EMBEDDED_MODEL

ARR = "actor_rollout_ref"
EXAMPLE_REWARD = str(Path(__file__).resolve().parents[2] / "examples" / "custom_reward.py")
ROWS = {
    # RLOO with GSPO's sequence-level ratio and DAPO's overlong penalty on the reward.
    "rloo_gspo_dapo": [
        "algorithm.adv_estimator=rloo",
        f"{ARR}.actor.policy_loss=gspo",
        f"{ARR}.actor.loss_agg_mode=seq-mean-token-mean",
        f"{ARR}.actor.clip_ratio_low=0.0003",
        f"{ARR}.actor.clip_ratio_high=0.0004",
        "reward.reward_manager=dapo",
        "reward.overlong_buffer.enable=true",
        "reward.overlong_buffer.len=20",
        "reward.overlong_buffer.penalty_factor=0.5",
    ],
    # REINFORCE++ with a KL penalty in the reward under the adaptive controller.
    "reinforce_pp_kl_in_reward": [
        "algorithm.adv_estimator=reinforce_plus_plus",
        "algorithm.gamma=0.99",
        f"{ARR}.actor.policy_loss=reinforce",
        f"{ARR}.actor.loss_agg_mode=token-sum",
        "algorithm.use_kl_in_reward=true",
        "algorithm.kl_penalty=abs",
        "algorithm.kl_ctrl.type=adaptive",
        "algorithm.kl_ctrl.kl_coef=0.01",
        "algorithm.kl_ctrl.target_kl=0.05",
        "algorithm.kl_ctrl.horizon=1000",
    ],
    # REINFORCE++ with a group baseline, GPG's loss, a k2 KL loss, an entropy bonus, and one scorer call per
    # step that gives the shortest correct response of each prompt a bonus.
    "reinforce_pp_baseline_kl_loss": [
        "algorithm.adv_estimator=reinforce_plus_plus_baseline",
        f"{ARR}.actor.policy_loss=gpg",
        f"{ARR}.actor.loss_agg_mode=seq-mean-token-sum",
        f"{ARR}.actor.use_kl_loss=true",
        f"{ARR}.actor.kl_loss_type=mse",
        f"{ARR}.actor.kl_loss_coef=0.01",
        f"{ARR}.actor.entropy_coeff=0.001",
        "reward.reward_manager=batch",
        f"reward.custom_reward_function.path={EXAMPLE_REWARD}",
        "reward.custom_reward_function.name=compute_score_batch",
        "+reward.reward_kwargs.length_bonus=0.25",
    ],
    # OPO, the length-normalised aggregation, and the score scaled then clipped.
    "opo_scaled_reward": [
        "algorithm.adv_estimator=opo",
        f"{ARR}.actor.loss_agg_mode=seq-mean-token-sum-norm",
        "reward.processors.scale=2.0",
        "reward.processors.clip_min=-1.0",
        "reward.processors.clip_max=1.5",
    ],
    "grpo_passk": ["algorithm.adv_estimator=grpo_passk"],
    "gpg": ["algorithm.adv_estimator=gpg", f"{ARR}.actor.policy_loss=gpg"],
    # Dr.GRPO (no std division) with DAPO's dynamic sampling on the score.
    "dr_grpo_filtered": [
        "algorithm.norm_adv_by_std_in_grpo=false",
        "algorithm.filter_groups.enable=true",
        "algorithm.filter_groups.metric=score",
    ],
}


def _check_rloo_gspo_dapo(steps: list[dict]) -> None:
    # The penalty falls from 0 at 20 - 20 = 0 tokens... to -0.5 at 20: every sample gets <= 0 added.
    assert all(-0.5 <= h["reward_extra/overlong_reward/mean"] <= 0.0 for h in steps)
    assert all(h["critic/score/min"] >= -0.5 for h in steps)


def _check_reinforce_pp_kl_in_reward(steps: list[dict]) -> None:
    # Step 1: the actor equals the reference, KL = 0, so the adaptive controller lowers the coefficient:
    # 0.01 * (1 + clip(0 / 0.05 - 1, -0.2, 0.2) * 16 / 1000) = 0.01 * 0.9968.
    assert steps[0]["actor/reward_kl_penalty_coeff"] == pytest.approx(0.01 * (1 - 0.2 * 16 / 1000))


def _check_reinforce_pp_baseline_kl_loss(steps: list[dict]) -> None:
    assert steps[0]["actor/kl_loss"] == 0.0  # the reference equals the actor before the first update
    for h in steps:  # a group with a correct response has exactly one 1.25
        assert (h["critic/score/max"] == 1.25) == (h["critic/acc/mean"] > 0)


def _check_opo_scaled_reward(steps: list[dict]) -> None:
    # Scores 0 / 1 become 0 / 2, clipped to 0 / 1.5.
    assert all(h["critic/score/max"] in (0.0, 1.5) and h["critic/score/min"] in (0.0, 1.5) for h in steps)


CHECKS = {
    "rloo_gspo_dapo": _check_rloo_gspo_dapo,
    "reinforce_pp_kl_in_reward": _check_reinforce_pp_kl_in_reward,
    "reinforce_pp_baseline_kl_loss": _check_reinforce_pp_baseline_kl_loss,
    "opo_scaled_reward": _check_opo_scaled_reward,
}


@pytest.fixture(scope="module")
def cluster():
    """One Ray cluster the rows' runs join (each run's actors and placement groups end with it)."""
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 8, "object_store_memory": 300 * 1024**2}
    )
    yield cluster
    if ray.is_initialized():
        ray.shutdown()
    cluster.shutdown()


def _run(tmp_path, cluster, *overrides):
    return train(
        tmp_path,
        "trainer.total_training_steps=2",
        f"ray_kwargs.ray_init.address={cluster.address}",
        "~ray_kwargs.ray_init.num_cpus",
        *overrides,
    )


def _finite_steps(history: list[dict]) -> list[dict]:
    steps = [h for h in history if h["step"] > 0]
    assert [h["step"] for h in steps] == [1, 2]
    for h in steps:
        bad = {k: v for k, v in h.items() if isinstance(v, float) and not math.isfinite(v)}
        assert not bad, f"non-finite metrics: {bad}"
        assert h["actor/grad_norm"] >= 0.0 and h["kv/controller_bytes_read"] == 0
    return steps


@pytest.mark.parametrize("row", sorted(ROWS))
def test_registered_names_train_through_main_ppo(tmp_path, cluster, row):
    steps = _finite_steps(_run(tmp_path, cluster, *ROWS[row]))
    CHECKS.get(row, lambda steps: None)(steps)


def _write_rows(path, source: str | None, n: int = 24) -> str:
    """Arithmetic questions as plain strings under ``question`` (no chat messages), gsm8k style."""
    with open(path, "w") as f:
        for i in range(n):
            a, b = 3 + i, 5 + 2 * i
            row = {"question": f"Sam has {a} apples and buys {b} more. How many now?"}
            row["reward_model"] = {"ground_truth": str(a + b)}
            if source:
                row["data_source"] = source
            f.write(json.dumps(row) + "\n")
    return str(path)


@pytest.mark.parametrize("source", ["gsm8k", "math"])
def test_other_scorers_train_on_plain_string_prompts(tmp_path, cluster, source):
    # No data_source column: every row takes data.default_data_source, which picks the scorer.
    train_file = _write_rows(tmp_path / "train.jsonl", None)
    val_file = _write_rows(tmp_path / "val.jsonl", None, n=8)
    history = _run(
        tmp_path,
        cluster,
        f"data.train_files={train_file}",
        f"data.val_files={val_file}",
        "data.prompt_key=question",
        f"data.default_data_source={source}",
        "data.seed=7",
        "data.filter_overlong_prompts=false",
        "data.truncation=left",
        f"{ARR}.model.path={EMBEDDED_MODEL}",
        f"{ARR}.model.tokenizer_path={EMBEDDED_MODEL}",
    )
    steps = _finite_steps(history)
    assert all(0.0 <= h["critic/score/mean"] <= 1.0 for h in steps)
    assert f"val-core/{source}/acc/mean@1" in steps[-1]
