"""trainer.mode=fully_async through main_ppo: sync equivalence (with the sync standalone run it compares to),
staleness bound, partial rollout, resume."""

import os
from collections import Counter

import pandas as pd
import pytest

from tests.trainer.conftest import suite_cluster
from tests.trainer.helpers import STANDALONE, crashing_mode, dumped_generations, joining, train
from verl_lite.trainer.checkpoint import complete_checkpoints, load_trainer_state
from verl_lite.trainer.validation import EMBEDDED_DATA

STALENESS = "trainer.replay_buffer.max_off_policy_threshold"
STRATEGY = "trainer.replay_buffer.off_policy_strategy"
# Measured in seconds, or only logged by one of the modes being compared.
PROBS_DIFF = "training/rollout_probs_diff_mean"
WALL_CLOCK = ("timing_s/", "timing_per_token_ms/", "perf/throughput", "replay_buffer/wait_s", "async/")


SYNC_STANDALONE = ["trainer.total_training_steps=2", *STANDALONE]


@pytest.fixture(scope="module")
def sync_standalone(tmp_path_factory):
    """The sync trainer on standalone hf rollout servers, 2 steps: the run the fully_async ones compare to."""
    return train(tmp_path_factory.mktemp("sync_standalone"), *SYNC_STANDALONE, *joining(suite_cluster()))


def test_grpo_with_standalone_hf_rollout_servers_two_steps(sync_standalone):
    assert [h["step"] for h in sync_standalone] == [1, 2]
    for h in sync_standalone:
        # the servers sample with the actor's weights: step 1 the initial ones, step 2 the synced ones
        assert h["training/rollout_probs_diff_mean"] < 1e-4
        assert h["update_weights/bytes"] > 0 and h["kv/controller_bytes_read"] == 0


def test_fully_async_with_staleness_0_and_a_sync_every_update_matches_the_sync_trainer(
    tmp_path, cluster, sync_standalone
):
    # S = 0 and k = 1: every group is generated with the weights of the step that trains it, from the same
    # prompts, uids and per-request seeds as in sync mode, so every metric but the clock's is the same.
    sync = sync_standalone
    fully_async = train(
        tmp_path / "async",
        *SYNC_STANDALONE,
        *joining(cluster),
        "trainer.mode=fully_async",
        "trainer.parameter_sync_step=1",
        f"{STALENESS}=0",
        f"{STRATEGY}=wait",
    )
    assert [h["step"] for h in fully_async] == [1, 2]
    for a, s in zip(fully_async, sync):
        compared = {k for k in s if not k.startswith(WALL_CLOCK)} - {PROBS_DIFF}
        assert compared <= set(a)
        assert {k: a[k] for k in compared} == {k: s[k] for k in compared}
        # the rollout's float32 log-probs depend on which requests the hf server padded into one batch
        # (a matter of arrival times): the same tokens, a mean |p_rollout - p_actor| off by float noise
        assert abs(a[PROBS_DIFF] - s[PROBS_DIFF]) < 1e-6
        assert a["async/staleness/max"] == 0.0 and a["async/partial_fraction"] == 0.0
        assert a["async/trainer_idle_s"] >= 0 and a["async/rollout_idle_s"] >= 0
    assert "val-core/synthetic_arith/acc/mean@1" in fully_async[-1]  # validated at the last step


def test_fully_async_drop_evicts_groups_older_than_the_bound_and_trains_none(tmp_path, cluster):
    # k = 2, S = 1: between two syncs the rollout runs ahead on old weights; a group submitted on
    # version 0 after step 1 would be trained at step 3, two versions behind: it is dropped and refilled.
    history = train(
        tmp_path,
        "trainer.total_training_steps=3",
        *STANDALONE,
        *joining(cluster),
        "trainer.mode=fully_async",
        "trainer.parameter_sync_step=2",
        f"{STALENESS}=1",
        f"{STRATEGY}=drop",
    )
    assert [h["step"] for h in history] == [1, 2, 3]
    assert max(h["async/staleness/max"] for h in history) <= 1.0
    assert sum(h["off_policy/evicted"] for h in history) > 0


# A fully_async run on the slow rollout (generations outlast updates) that dies right after step 2 was
# logged and checkpointed; importing the slow rollout module registers hf_slow and fully_async_checked.
CRASHING_MODE = "import tests.trainer.slow_rollout  # noqa: F401\n" + crashing_mode(
    "fully_async_crash_after_2", "tests.trainer.slow_rollout", "CheckedFullyAsync", after_step=2
)


def test_fully_async_bounds_staleness_continues_aborted_generations_and_resumes_each_prompt_once(
    tmp_path, cluster
):
    data = tmp_path / "train8.parquet"
    pd.read_parquet(os.path.join(EMBEDDED_DATA, "train.parquet")).head(8).to_parquet(data)
    modes = tmp_path / "modes.py"
    modes.write_text(CRASHING_MODE)
    dumps, run_dir = tmp_path / "dumps", tmp_path / "run"
    common = [
        f"data.train_files={data}",
        *STANDALONE,
        *joining(cluster),
        "actor_rollout_ref.rollout.name=hf_slow",
        # One server decodes the 32 requests of the first launch (8 groups of 4) 8 at a time, first come
        # first served, each agent-loop worker's groups arriving together: the first two of its four
        # batches finish 4 groups, so step 1 trains and syncs while the third is decoding (partial
        # rollout). Two servers would each take samples of every group, in either worker's order, and
        # could finish no group before all 32 requests were done.
        "actor_rollout_ref.rollout.n_gpus_per_node=1",
        "actor_rollout_ref.rollout.max_num_seqs=8",
        f"trainer.extensions=[{modes}]",
        f"{STALENESS}=1",
        f"{STRATEGY}=wait",
        "trainer.total_epochs=2",  # 2 steps an epoch
        "trainer.total_training_steps=4",
        "trainer.save_freq=2",
        f"trainer.rollout_data_dir={dumps}",
    ]
    with pytest.raises(Exception, match="simulated crash after step 2"):
        train(run_dir, *common, "trainer.mode=fully_async_crash_after_2")
    resumed = train(run_dir, *common, "trainer.mode=fully_async_checked")
    assert [h["step"] for h in resumed] == [1, 2, 3, 4]
    # the bound holds for every trained trajectory (staleness of its oldest token)
    assert max(h["async/staleness/max"] for h in resumed) <= 1.0
    # some trajectory was cut by a sync and continued under the new weights, contiguous and masked right
    spanning = sum(h["check/spanning"] for h in resumed)
    assert spanning > 0 and sum(h["check/contiguous"] for h in resumed) == spanning
    assert any(h["async/partial_fraction"] > 0 for h in resumed)
    steps = dumped_generations(dumps)
    assert sorted(steps) == [1, 2, 3, 4]
    rows = [row for step_rows in steps.values() for row in step_rows]
    assert any(row["min_weight_version"] < row["weight_version"] for row in rows)
    # 2 epochs of 8 prompts: each prompt trained once an epoch (steps may mix the epochs' groups, since a
    # step takes the oldest groups finished), each uid once: none lost in flight, none trained twice
    assert all(len(step_rows) == 4 * 4 for step_rows in steps.values())
    prompt_of = {row["uid"]: row["prompt"] for row in rows}
    assert len(prompt_of) == 16 and set(Counter(prompt_of.values()).values()) == {2}
    uids = [row["uid"] for row in rows]
    assert all(uids.count(u) == 4 for u in set(uids))
    _, last = complete_checkpoints(run_dir / "grpo_tiny" / "checkpoints")[-1]
    assert load_trainer_state(last)["submitted"] == 16  # no prompt drawn twice
