"""ReplayBuffer on a real KV store: ordering, blocking, eviction and refill, staleness, resume."""

import threading
import time

import pytest
import torch
from tensordict import TensorDict

from tests.conftest import start_local_ray
from verl_lite.kv import KVBatchMeta, init_kv_store, shutdown_kv_store
from verl_lite.protocol import to_jagged
from verl_lite.trainer.ppo.replay_buffer import ReplayBuffer, ReplayBufferConfig
from verl_lite.trajectory import trajectory_key, trajectory_tag

FAST = {"timeout_s": 5.0, "poll_interval_s": 0.02}


@pytest.fixture(scope="module")
def client():
    start_local_ray()
    shutdown_kv_store()
    yield init_kv_store(num_storage_units=2, client_name="controller")
    shutdown_kv_store()


@pytest.fixture
def part(client, request):
    yield request.node.name
    client.kv_clear(None, request.node.name)


def roll_out(client, part, uid, accs, failed=None, step=0, fields=False, samples=None):
    """What rollout workers do: write the group's trajectories (of ``samples``, default all of them), the
    last one failed to score with the error ``failed`` when given; their keys and tags."""
    samples = samples or len(accs)
    keys = [trajectory_key(uid, s) for s in range(len(accs))]
    tags = [trajectory_tag(uid, "success", 3, 5, step, samples, acc=a) for a in accs]
    if failed:
        tags[-1] = trajectory_tag(uid, "failure", 3, 5, step, samples, acc=accs[-1], error=failed)
    td = TensorDict({"responses": to_jagged([torch.arange(s + 1) for s in range(len(accs))])}, [len(accs)])
    client.kv_batch_put(keys, part, fields=td if fields else None, tags=tags)
    return KVBatchMeta(keys=keys, tags=tags, partition_id=part)


def test_sample_returns_the_oldest_whole_groups_first(client, part):
    buffer = ReplayBuffer(ReplayBufferConfig(**FAST), client=client)
    for uid, step in [("c", 2), ("a", 0), ("b", 1)]:
        buffer.add_groups([uid], global_steps=step, partition_id=part)
        roll_out(client, part, uid, [0, 1, 1])
    meta, _ = buffer.sample(global_step=3, partition_id=part, batch_size=2)
    assert meta.group_uids() == ["a", "b"]
    assert meta.keys == ["a_0_0", "a_1_0", "a_2_0", "b_0_0", "b_1_0", "b_2_0"]
    assert [t["uid"] for t in meta.tags] == ["a"] * 3 + ["b"] * 3
    meta2, _ = buffer.sample(global_step=3, partition_id=part, batch_size=1)
    assert meta2.group_uids() == ["c"]  # a sampled group is never handed out twice


def test_sample_blocks_until_enough_groups_have_finished(client, part):
    buffer = ReplayBuffer(ReplayBufferConfig(**FAST), client=client)
    buffer.add_groups(["x", "y"], global_steps=0, partition_id=part)
    roll_out(client, part, "x", [0, 1])
    late = threading.Timer(0.4, roll_out, args=(client, part, "y", [1, 0]))
    late.start()
    start = time.monotonic()
    meta, metrics = buffer.sample(global_step=0, partition_id=part, batch_size=2)
    late.join()
    assert time.monotonic() - start >= 0.4 and metrics["replay_buffer/wait_s"] >= 0.4
    assert meta.group_uids() == ["x", "y"]


def test_timeout_error_counts_pending_running_finished_and_failed_groups(client, part):
    buffer = ReplayBuffer(ReplayBufferConfig(timeout_s=0.3, poll_interval_s=0.02), client=client)
    buffer.add_groups(["p", "r", "f", "x"], global_steps=0, partition_id=part)
    roll_out(client, part, "r", [1], samples=2)
    roll_out(client, part, "f", [1, 0])
    roll_out(client, part, "x", [1], failed="ValueError")
    with pytest.raises(TimeoutError) as err:
        buffer.sample(global_step=0, partition_id=part, batch_size=3)
    assert "waited 0.3s at global step 0 for 3 finished group(s)" in str(err.value)
    assert "groups: 1 pending, 1 running, 1 finished, 1 failed" in str(err.value)


def test_failed_groups_are_evicted_and_refilled(client, part):
    refills = []
    buffer = ReplayBuffer(ReplayBufferConfig(**FAST), client=client)
    buffer.refill_fn = lambda k: refills.append(k) or buffer.add_groups([f"new{len(refills)}"], 0, part)
    buffer.add_groups(["ok", "bad"], global_steps=0, partition_id=part)
    roll_out(client, part, "ok", [0, 1])
    roll_out(client, part, "bad", [0, 1], failed="ValueError")
    meta, metrics = buffer.sample(global_step=0, partition_id=part, batch_size=1)
    assert meta.group_uids() == ["ok"] and metrics["rollout_failure/evicted"] == 1.0
    assert refills == [1]
    assert sorted(client.kv_list(part)[part]) == ["ok_0_0", "ok_1_0"]  # "bad" keys cleared
    assert buffer.group_uids(part, "pending") == ["new1"] and buffer.group_uids(part, "failure") == []


def test_filter_groups_evicts_zero_variance_groups_and_asks_for_replacements(client, part):
    refills = []
    cfg = ReplayBufferConfig(filter_groups_enable=True, filter_groups_metric="acc", **FAST)
    buffer = ReplayBuffer(cfg, client=client, refill_fn=refills.append)
    buffer.add_groups(["same", "mixed"], global_steps=0, partition_id=part)
    roll_out(client, part, "same", [1, 1, 1, 1])  # std 0: no learning signal
    roll_out(client, part, "mixed", [0, 1, 0, 1])
    meta, metrics = buffer.sample(global_step=0, partition_id=part, batch_size=1)
    assert meta.group_uids() == ["mixed"]
    assert metrics["filter_groups/evicted"] == 1.0 and refills == [1]
    assert "same" not in client.kv_list(part)[part]


def test_filter_groups_refills_at_most_max_num_gen_batches_then_fails_saying_what_it_kept(client, part):
    cfg = ReplayBufferConfig(filter_groups_enable=True, filter_groups_max_num_gen_batches=2, **FAST)
    buffer = ReplayBuffer(cfg, client=client)
    refills = []

    def refill(k):  # every replacement comes back with the same acc in each sample
        refills.append(k)
        buffer.add_groups([f"new{len(refills)}"], 0, part)
        roll_out(client, part, f"new{len(refills)}", [1, 1])

    buffer.refill_fn = refill
    buffer.add_groups(["mixed", "same"], global_steps=0, partition_id=part)
    roll_out(client, part, "mixed", [0, 1])
    roll_out(client, part, "same", [0, 0])
    start = time.monotonic()
    with pytest.raises(RuntimeError) as err:
        buffer.sample(global_step=0, partition_id=part, batch_size=2)
    # "same", new1 and new2 were evicted; only the first two were replaced.
    assert refills == [1, 1] and time.monotonic() - start < FAST["timeout_s"]
    assert (
        "kept 1 of the 2 groups needed at global step 0 (0 still generating) after 2 extra generation "
        "batch(es), the limit algorithm.filter_groups.max_num_gen_batches=2; 3 group(s) had the same 'acc'"
    ) in str(err.value)
    assert "Raise max_num_gen_batches" in str(err.value)


def test_exhausted_refills_still_wait_for_groups_in_flight(client, part):
    cfg = ReplayBufferConfig(filter_groups_enable=True, filter_groups_max_num_gen_batches=1, **FAST)
    buffer = ReplayBuffer(cfg, client=client)
    buffer.refill_fn = lambda k: buffer.add_groups(["refilled"], 0, part)  # stays pending for now
    buffer.add_groups(["mixed", "same"], global_steps=0, partition_id=part)
    roll_out(client, part, "mixed", [0, 1])
    roll_out(client, part, "same", [1, 1])
    late = threading.Timer(0.3, roll_out, args=(client, part, "refilled", [1, 0]))
    late.start()
    meta, metrics = buffer.sample(global_step=0, partition_id=part, batch_size=2)  # 1 kept + 1 in flight
    late.join()
    assert meta.group_uids() == ["mixed", "refilled"] and metrics["filter_groups/evicted"] == 1.0


def test_refills_stop_after_max_refill_batches_naming_the_evictions(client, part):
    cfg = ReplayBufferConfig(max_refill_batches=2, failure_window=100, **FAST)
    buffer = ReplayBuffer(cfg, client=client)
    refills = []

    def refill(k):  # every replacement fails to score too
        for _ in range(k):
            refills.append(f"new{len(refills)}")
            buffer.add_groups([refills[-1]], 0, part, tags=[{"data_source": "math"}])
            roll_out(client, part, refills[-1], [0, 1], failed="KeyError: 'answer'")

    buffer.refill_fn = refill
    buffer.add_groups(["a", "b"], global_steps=0, partition_id=part)
    roll_out(client, part, "a", [0, 1], failed="KeyError: 'answer'")
    roll_out(client, part, "b", [0, 1], failed="KeyError: 'answer'")
    start = time.monotonic()
    with pytest.raises(RuntimeError) as err:
        buffer.sample(global_step=0, partition_id=part, batch_size=2)
    # 2 x batch_size = 4 replacements, all failed: 6 evictions, then no more refills
    assert len(refills) == 4 and time.monotonic() - start < FAST["timeout_s"]
    assert (
        "only 0 of the 2 groups needed at global step 0 are ready after 4 replacement groups, the limit "
        "trainer.replay_buffer.max_refill_batches=2 x 2; evicted: 6 rollout_failure; the reward function "
        "last raised, for data_source='math': KeyError: 'answer'."
    ) in str(err.value)


def test_a_window_of_scoring_failures_stops_sample_with_the_scorers_message(client, part):
    cfg = ReplayBufferConfig(max_failure_fraction=0.75, failure_window=4, **FAST)
    buffer = ReplayBuffer(cfg, client=client, refill_fn=lambda k: None)
    uids = ["g0", "g1", "g2", "g3"]
    buffer.add_groups(uids, 0, part, tags=[{"data_source": "gsm8k"}] * 4)
    roll_out(client, part, "g0", [0, 1])
    for uid in uids[1:]:  # 3 of 4 = 0.75 failed: the bound is reached
        roll_out(client, part, uid, [0, 1], failed="RuntimeError: judge offline")
    with pytest.raises(RuntimeError) as err:
        buffer.sample(global_step=5, partition_id=part, batch_size=4)
    assert (
        "scoring failed for 3 of the last 4 prompt groups at global step 5 (reward.max_failure_fraction=0.75 "
        "of reward.failure_window=4); the reward function raised, for data_source='gsm8k': "
        "RuntimeError: judge offline"
    ) == str(err.value)


def test_fewer_failures_than_the_fraction_only_evict(client, part):
    cfg = ReplayBufferConfig(max_failure_fraction=0.75, failure_window=4, **FAST)
    buffer = ReplayBuffer(cfg, client=client)
    buffer.add_groups(["g0", "g1", "g2", "g3"], 0, part)
    roll_out(client, part, "g0", [0, 1])
    roll_out(client, part, "g1", [1, 0])
    roll_out(client, part, "g2", [0, 1], failed="ValueError")  # 2 of 4 failed: 0.5 < 0.75
    roll_out(client, part, "g3", [0, 1], failed="ValueError")
    meta, metrics = buffer.sample(global_step=0, partition_id=part, batch_size=2)
    assert meta.group_uids() == ["g0", "g1"] and metrics["rollout_failure/evicted"] == 2.0


def test_a_long_wait_prints_what_it_waits_for(client, part, capsys):
    cfg = ReplayBufferConfig(timeout_s=0.5, poll_interval_s=0.02, report_after_s=0.1)
    buffer = ReplayBuffer(cfg, client=client)
    buffer.add_groups(["done", "slow", "queued"], 0, part)
    roll_out(client, part, "done", [0, 1])
    roll_out(client, part, "slow", [1], samples=2)
    with pytest.raises(TimeoutError):
        buffer.sample(global_step=2, partition_id=part, batch_size=3)
    lines = capsys.readouterr().out.splitlines()
    # reports after about 0.1, 0.2 and 0.4 s (fewer if a slow poll skips one), never one per poll
    assert 1 <= len(lines) <= 3 and all(
        line.startswith("ReplayBuffer: waiting ")
        and "at global step 2 for 2 of 3 groups (pending: 1, "
        "running: 1, finished: 1; gives up after trainer.sample_timeout_s=0.5)"
        in line
        for line in lines
    ), lines


def test_buffer_settings_come_from_the_ppo_config():
    from tests.trainer.test_config_validation import load

    config = load(
        "algorithm.filter_groups.enable=true",
        "algorithm.filter_groups.max_num_gen_batches=7",
        "trainer.replay_buffer.max_off_policy_threshold=1",
        "trainer.replay_buffer.off_policy_strategy=wait",
        "trainer.replay_buffer.max_refill_batches=3",
        "reward.max_failure_fraction=0.5",
        "reward.failure_window=64",
        "trainer.sample_timeout_s=30",
    )
    assert ReplayBufferConfig.from_ppo_config(config) == ReplayBufferConfig(
        timeout_s=30.0,
        filter_groups_enable=True,
        filter_groups_max_num_gen_batches=7,
        max_off_policy_threshold=1,
        off_policy_strategy="wait",
        max_refill_batches=3,
        max_failure_fraction=0.5,
        failure_window=64,
    )


def test_drop_strategy_evicts_groups_older_than_the_threshold_and_refills(client, part):
    refills = []
    cfg = ReplayBufferConfig(max_off_policy_threshold=2, off_policy_strategy="drop", **FAST)
    buffer = ReplayBuffer(cfg, client=client, refill_fn=refills.append)
    buffer.add_groups(["old"], global_steps=0, partition_id=part)
    buffer.add_groups(["recent"], global_steps=4, partition_id=part)
    roll_out(client, part, "old", [0, 1])
    roll_out(client, part, "recent", [0, 1])
    meta, metrics = buffer.sample(global_step=5, partition_id=part, batch_size=1)  # staleness 5 > 2, 1 <= 2
    assert meta.group_uids() == ["recent"] and metrics["off_policy/evicted"] == 1.0 and refills == [1]
    late = trajectory_tag("old", "success", 3, 5, 0, 2, acc=1)
    client.kv_batch_put(["old_0_0"], part, tags=[late])  # a rollout still finishing the dropped group
    buffer.group_counts(part)  # the next read of the tags clears it
    assert "old_0_0" not in client.kv_list(part)[part]


def test_wait_strategy_holds_sampling_while_an_in_flight_group_is_at_the_bound(client, part):
    cfg = ReplayBufferConfig(
        max_off_policy_threshold=2, off_policy_strategy="wait", timeout_s=0.3, poll_interval_s=0.02
    )
    buffer = ReplayBuffer(cfg, client=client)
    # at step 5 "slow" is 2 steps old: trained later, it would pass the bound, so this step waits for it
    buffer.add_groups(["slow"], global_steps=3, partition_id=part)
    buffer.add_groups(["fresh"], global_steps=4, partition_id=part)
    roll_out(client, part, "slow", [1], samples=2)
    roll_out(client, part, "fresh", [0, 1])
    with pytest.raises(
        TimeoutError, match=r"held while 1 in-flight group\(s\) at max_off_policy_threshold=2 steps old or"
    ):
        buffer.sample(global_step=5, partition_id=part, batch_size=1)
    roll_out(client, part, "slow", [1, 0])  # once it lands it is kept (not dropped) and sampled first
    meta, metrics = buffer.sample(global_step=5, partition_id=part, batch_size=1)
    assert meta.group_uids() == ["slow"] and metrics["off_policy/evicted"] == 0.0


def test_state_dict_round_trip_restores_groups_fields_and_requeues_running_ones(client, part):
    buffer = ReplayBuffer(ReplayBufferConfig(**FAST), client=client)
    buffer.add_groups(["done", "busy", "waiting", "taken"], global_steps=1, partition_id=part)
    roll_out(client, part, "done", [0, 1], fields=True)
    roll_out(client, part, "taken", [1, 0])
    buffer.sample(global_step=1, partition_id=part, batch_size=1)  # takes "done" (oldest by seq)
    roll_out(client, part, "busy", [1], samples=2)  # a partial rollout in flight
    state = buffer.state_dict()
    client.kv_clear(None, part)  # the old run's store is gone
    resumed = ReplayBuffer(ReplayBufferConfig(**FAST), client=client)
    resumed.load_state_dict(state)
    assert resumed.group_uids(part, "pending") == ["busy", "waiting"]
    assert "busy_0_0" not in client.kv_list(part)[part]  # partial trajectories dropped with the requeue
    back = client.kv_batch_get(["done_0_0", "done_1_0"], part)
    assert back["responses"].offsets().diff().tolist() == [1, 2]
    meta, _ = resumed.sample(global_step=2, partition_id=part, batch_size=1)
    assert meta.group_uids() == ["taken"]  # "done" was already handed out before the checkpoint
    assert resumed.add_groups(["next"], 2, part).tags[0]["seq"] == 4


def test_release_clears_a_sampled_batch_and_forgets_its_groups_and_resubmit_restarts_their_age(client, part):
    buffer = ReplayBuffer(ReplayBufferConfig(**FAST), client=client)
    buffer.add_groups(["a", "b"], global_steps=0, partition_id=part)
    roll_out(client, part, "a", [0, 1], fields=True)
    meta, _ = buffer.sample(global_step=0, partition_id=part, batch_size=1)
    assert buffer.group_counts(part) == {"pending": 1, "running": 0, "finished": 0, "failure": 0}
    buffer.release(meta)
    assert client.kv_list(part)[part] == {} and buffer.group_uids(part, "finished") == []
    assert buffer.group_uids(part, "pending") == ["b"]
    again = buffer.resubmit(["b"], 7, part)
    assert again.keys == ["b"] and again.global_step == 7 and again.tags[0]["global_steps"] == 7
    cfg = ReplayBufferConfig(max_off_policy_threshold=2, **FAST)
    strict = ReplayBuffer(cfg, client=client, refill_fn=lambda k: None)
    strict.load_state_dict(buffer.state_dict())
    roll_out(client, part, "b", [1, 0], step=7)
    meta, metrics = strict.sample(global_step=8, partition_id=part, batch_size=1)  # age 1 since the resubmit
    assert meta.group_uids() == ["b"] and metrics["off_policy/evicted"] == 0.0


def test_a_buffer_that_does_not_list_the_store_samples_what_it_was_handed_also_after_a_resume(client, part):
    buffer = ReplayBuffer(ReplayBufferConfig(**FAST), client=client)
    buffer.lists_store = False  # the sync modes: every generation has returned before sampling
    buffer.add_groups(["a", "b", "c"], global_steps=0, partition_id=part)
    buffer.add_trajectories(roll_out(client, part, "a", [0, 1]))
    buffer.add_trajectories(roll_out(client, part, "b", [1, 1]))
    roll_out(client, part, "c", [1, 0])  # stored but not handed over: unseen
    assert buffer.group_counts(part) == {"pending": 1, "running": 0, "finished": 2, "failure": 0}
    meta, _ = buffer.sample(global_step=0, partition_id=part, batch_size=1)
    assert meta.group_uids() == ["a"]
    buffer.release(meta)
    resumed = ReplayBuffer(ReplayBufferConfig(**FAST), client=client)
    resumed.lists_store = False
    resumed.load_state_dict(buffer.state_dict())  # the snapshot's tags are what it knows now
    assert resumed.group_counts(part) == {"pending": 0, "running": 0, "finished": 2, "failure": 0}
    meta, _ = resumed.sample(global_step=1, partition_id=part, batch_size=2)
    assert meta.group_uids() == ["b", "c"]
