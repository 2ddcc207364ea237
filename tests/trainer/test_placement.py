"""Placements: the default logical CPUs of a local Ray cover every pool the config asks for."""

from __future__ import annotations

from tests.trainer.helpers import STANDALONE, train
from verl_lite.trainer.load import compose_config, load_ppo_config
from verl_lite.trainer.placement import get_placement


def test_slots_count_the_standalone_rollout_pool_too():
    hybrid = load_ppo_config(compose_config("ppo_trainer", ["trainer.n_gpus_per_node=2"]))
    assert get_placement(hybrid).slots(hybrid) == 2  # the rollout servers share the trainer's processes
    # STANDALONE: 2 rollout servers on a pool of their own, beside the trainer's 2 slots
    standalone = load_ppo_config(compose_config("ppo_trainer", ["trainer.n_gpus_per_node=2", *STANDALONE]))
    assert get_placement(standalone).slots(standalone) == 2 + 2


def test_a_standalone_run_with_more_servers_than_the_old_default_cpus_trains_on_the_defaults(tmp_path):
    # 1 policy slot + 4 rollout servers = 5 CPU bundles: the default num_cpus used to count only the
    # policy's slot (max(4, 1 + 2) = 4), so the rollout pool could never be placed
    overrides = [
        *STANDALONE,
        "actor_rollout_ref.rollout.n_gpus_per_node=4",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "ray_kwargs.ray_init.num_cpus=null",
        "trainer.total_training_steps=1",
    ]
    history = train(tmp_path, *overrides, own_ray=True)
    assert [h["step"] for h in history] == [1]
