"""Worker groups on a real local Ray: meshes, custom modes, colocation, gloo, and the errors users see."""

import time

import pytest
import ray
import torch
from tensordict import TensorDict

from tests.single_controller.workers import Actor, Critic, Echo, GlooWorker, MeshWorker
from verl_lite.single_controller import DispatchPlan, Worker, register, register_dispatch_mode
from verl_lite.single_controller.ray import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    ResourcePoolError,
    ResourcePoolManager,
    Role,
    WorkerError,
    create_colocated_worker_cls,
)


def make_group(cls, n, name, **kwargs):
    return RayWorkerGroup(RayResourcePool([n], name_prefix=name), RayClassWithInitArgs(cls, **kwargs))


def release(group):
    group.kill()
    group.resource_pool.release()


def test_mesh_dispatch_gives_tp_peers_identical_shards_and_gathers_collect_ranks(ray_local):
    group = make_group(MeshWorker, 4, "mesh", tp_size=2)  # ranks 0,1 -> dp 0; ranks 2,3 -> dp 1
    try:
        out = group.compute(TensorDict({"x": torch.arange(6.0)}, batch_size=[6]))
        # Only collect ranks (0 and 2) are gathered: dp 0 computed rows 0-2 on rank 0, dp 1 rows 3-5 on rank 2.
        assert out["x"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        assert out["rank"].tolist() == [0, 0, 0, 2, 2, 2]
        plan = group.compute  # the peers must have seen the same shard: ask the dispatch directly
        from verl_lite.single_controller.dispatch import make_nd_dispatch

        shards = make_nd_dispatch("actor").dispatch(group, (TensorDict({"x": torch.arange(6.0)}, [6]),), {})
        assert [s[0]["x"].tolist() for s in shards.args] == [[0.0, 1.0, 2.0]] * 2 + [[3.0, 4.0, 5.0]] * 2
        assert callable(plan)
    finally:
        release(group)


def _dispatch_reversed(group, args, kwargs):
    # Rank i receives the (world_size - 1 - i)-th element of the single list argument.
    values = args[0]
    return DispatchPlan(
        [(values[group.world_size - 1 - i],) for i in range(group.world_size)],
        [{} for _ in range(group.world_size)],
    )


def _collect_sum(group, outputs, context):
    return sum(outputs)


REVERSED_SUM = register_dispatch_mode("test_reversed_sum", _dispatch_reversed, _collect_sum)


class ReversedWorker(Worker):
    @register(dispatch_mode="test_reversed_sum")
    def weigh(self, value: int) -> int:
        return value * (self.rank + 1)


def test_user_registered_dispatch_mode_is_used_by_name(ray_local):
    group = make_group(ReversedWorker, 3, "rev")
    try:
        # rank 0 gets 30, rank 1 gets 20, rank 2 gets 10 -> 30*1 + 20*2 + 10*3 = 100
        assert group.weigh([10, 20, 30]) == 100
    finally:
        release(group)


def test_unknown_dispatch_mode_lists_known_modes():
    with pytest.raises(KeyError, match="unknown dispatch mode 'nope'; known: .*dp_compute_data"):
        register(dispatch_mode="nope")


def test_colocated_roles_share_one_process_per_bundle(ray_local):
    colocated = create_colocated_worker_cls(
        {"actor": RayClassWithInitArgs(Actor), "critic": RayClassWithInitArgs(Critic)}
    )
    group = RayWorkerGroup(RayResourcePool([2], name_prefix="coloc"), colocated)
    try:
        roles = group.spawn({"actor", "critic"})
        actor_hello, critic_hello = roles["actor"].hello(), roles["critic"].hello()
        assert [h[0] for h in actor_hello] == ["actor", "actor"]
        assert [h[0] for h in critic_hello] == ["critic", "critic"]
        assert [h[1] for h in actor_hello] == [h[1] for h in critic_hello]  # same PID per rank
        out = roles["actor"].double(TensorDict({"x": torch.arange(3.0)}, [3]))
        assert out["y"].tolist() == [0.0, 2.0, 4.0]
    finally:
        release(group)


def test_gloo_all_reduce_across_two_workers(ray_local):
    group = make_group(GlooWorker, 2, "gloo")
    try:
        assert group.all_reduce_rank() == [3.0, 3.0]  # (0 + 1) + (1 + 1)
    finally:
        release(group)


def test_worker_exception_names_method_rank_and_traceback(ray_local):
    group = make_group(Echo, 3, "fail")
    try:
        with pytest.raises(WorkerError) as info:
            group.fail_on_rank(2)
        message = str(info.value)
        assert "Echo.fail_on_rank on rank 2 of 3" in message
        assert "failed with ValueError: boom from rank 2" in message
        assert "worker traceback" in message and "in fail_on_rank" in message
    finally:
        release(group)


def test_oversubscribed_pool_fails_fast_with_pool_name_asked_and_available(ray_local):
    start = time.monotonic()
    with pytest.raises(ResourcePoolError, match=r"'huge' asks for \[1000\] CPU slots.*available"):
        RayResourcePool([1000], name_prefix="huge").get_placement_groups()
    assert time.monotonic() - start < 10


def test_pending_pool_times_out_with_what_was_available(ray_local):
    first = RayResourcePool([10], name_prefix="hog")
    first.get_placement_groups()
    try:
        pool = RayResourcePool([10], name_prefix="late", placement_timeout_s=2)
        with pytest.raises(ResourcePoolError, match="'late' asks for.*available"):
            pool.get_placement_groups()
    finally:
        first.release()


def test_a_pool_short_of_slots_a_kept_pool_holds_waits_until_it_is_ended(ray_local, monkeypatch):
    from verl_lite.single_controller.ray import parking

    monkeypatch.setattr(parking, "KEEP_S", 1.0)
    # Both pools ask for more than half the cluster, so the second fits only once the first is ended,
    # whatever else holds or frees slots meanwhile (pools that runs of earlier tests kept are ended
    # within KEEP_S).
    total = ray.cluster_resources()["CPU"]
    deadline = time.monotonic() + 75
    while ray.available_resources().get("CPU", 0) <= total / 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    free = int(ray.available_resources()["CPU"])
    assert free > total / 2, f"more than half of the {total} CPU slots still held 75 s on"
    kept = RayResourcePool([free], name_prefix="kept")
    kept.get_placement_groups()
    parking.keep(kept, [])  # as a finished run leaves its pool: ended after KEEP_S unless a run takes it
    start = time.monotonic()
    pool = RayResourcePool([free], name_prefix="waiting")
    try:
        pool.get_placement_groups()
        assert 1.0 <= time.monotonic() - start < 10.0
        assert parking.take_pools([kept.shape]) == [None]  # ended, not kept any more
    finally:
        pool.release()


def test_resource_pool_manager_maps_roles_to_pools(ray_local):
    manager = ResourcePoolManager(
        resource_pool_spec={"global_pool": [2]}, mapping={Role.Actor: "global_pool"}
    )
    manager.create_resource_pool()
    try:
        assert manager.get_resource_pool(Role.Actor).world_size == 2
        with pytest.raises(KeyError, match="Critic"):
            manager.get_resource_pool(Role.Critic)
    finally:
        manager.release()


def test_resource_pool_manager_rejects_mapping_to_unknown_pool():
    with pytest.raises(ValueError, match="names pool 'other'.*known pools: \\['global_pool'\\]"):
        ResourcePoolManager(resource_pool_spec={"global_pool": [2]}, mapping={Role.Critic: "other"})
