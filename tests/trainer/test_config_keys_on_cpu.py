"""Keys that used to be dead or hard-coded reach the run: loss parameters, val_batch_size, DAPO's bound, staleness."""

import json
import math

import pandas as pd
import pytest

from tests.trainer.helpers import train

# One 1-step run per loss; each sets that loss's keys to values whose effect shows in a metric.
# sapo's keys ride along with the validation run below (its temperatures show in no metric).
LOSS_RUNS = {
    # A zero-width truncation window: in the second epoch (ratio != 1) every token is truncated.
    "cispo": (
        ["cispo_clip_ratio_low=0.0", "cispo_clip_ratio_high=0.0", "ppo_epochs=2"],
        lambda h: h["actor/pg_clipfrac"] + h["actor/pg_clipfrac_lower"] > 0,
    ),
    # Every token is in the band and selected, so no gradient is left.
    "clip_cov": (
        ["clip_cov_ratio=1.0", "clip_cov_lb=-1000.0", "clip_cov_ub=1000.0"],
        lambda h: h["actor/pg_cov_clipfrac"] == 1.0 and h["actor/grad_norm"] == 0.0,
    ),
    "kl_cov": (
        ["kl_cov_ratio=1.0", "kl_cov_coef=2.0"],
        lambda h: h["actor/pg_kl_cov_frac"] == 1.0,
    ),
}


@pytest.mark.parametrize("loss", sorted(LOSS_RUNS))
def test_each_policy_loss_runs_with_its_keys_set(loss, tmp_path):
    keys, effect = LOSS_RUNS[loss]
    history = train(
        tmp_path,
        "trainer.total_training_steps=1",
        f"actor_rollout_ref.actor.policy_loss={loss}",
        *[f"actor_rollout_ref.actor.{key}" for key in keys],
    )
    assert [h["step"] for h in history] == [1]
    assert effect(history[0]), {k: v for k, v in history[0].items() if k.startswith("actor/")}


def test_sapo_keys_chunked_validation_and_staleness_control_in_one_run(tmp_path):
    val = pd.read_parquet(_embedded("val.parquet")).head(10)
    val.to_parquet(tmp_path / "val10.parquet")
    history = train(
        tmp_path,
        "trainer.total_training_steps=1",
        f"data.val_files={tmp_path / 'val10.parquet'}",
        "data.val_batch_size=4",  # generate calls of 4, 4 and 2 prompts
        "trainer.val_before_train=true",
        f"trainer.validation_data_dir={tmp_path / 'val'}",
        "trainer.replay_buffer.max_off_policy_threshold=0",
        "trainer.replay_buffer.off_policy_strategy=wait",
        "actor_rollout_ref.actor.policy_loss=sapo",
        "actor_rollout_ref.actor.sapo_tau_pos=2.0",
        "actor_rollout_ref.actor.sapo_tau_neg=3.0",
        "actor_rollout_ref.actor.log_ratio_clamp=5.0",
    )
    questions = [info["question"] for info in val["extra_info"]]
    for step in (0, 1):  # before training and after the last step
        rows = [json.loads(line) for line in (tmp_path / "val" / f"{step}.jsonl").read_text().splitlines()]
        assert len(rows) == len(questions) and len({r["uid"] for r in rows}) == len(rows)
        assert all(sum(q in r["prompt"] for r in rows) == 1 for q in questions)
    last = history[-1]
    assert last["off_policy/staleness_max"] == 0.0 and last["off_policy/evicted"] == 0.0
    assert "val-core/synthetic_arith/acc/mean@1" in last
    assert math.isfinite(last["actor/pg_loss"]) and last["actor/grad_norm"] > 0


def test_unsatisfiable_dynamic_sampling_fails_fast_saying_how_many_groups_were_kept(tmp_path):
    # Greedy rollouts give every sample of a prompt the same answer: no group survives filtering.
    with pytest.raises(Exception) as err:
        train(
            tmp_path,
            "trainer.total_training_steps=1",
            "actor_rollout_ref.rollout.do_sample=false",
            "algorithm.filter_groups.enable=true",
            "algorithm.filter_groups.max_num_gen_batches=1",
        )
    message = str(err.value)
    assert "DAPO dynamic sampling kept 0 of the 4 groups needed" in message
    assert (
        "after 1 extra generation batch(es), the limit algorithm.filter_groups.max_num_gen_batches=1"
        in message
    )


def _embedded(name):
    from verl_lite.trainer.validation import EMBEDDED_DATA

    return f"{EMBEDDED_DATA}/{name}"
