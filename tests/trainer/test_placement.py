"""Placements: the default logical CPUs of a local Ray cover every pool the config asks for."""

from __future__ import annotations

from tests.trainer.helpers import STANDALONE, compose_config
from verl_lite.main_ppo import load_config
from verl_lite.trainer.placement import get_placement


def test_slots_count_the_standalone_rollout_pool_too():
    hybrid = load_config(compose_config("ppo_trainer", ["trainer.n_gpus_per_node=2"]))
    assert get_placement(hybrid).slots(hybrid) == 2  # the rollout servers share the trainer's processes
    # STANDALONE: 2 rollout servers on a pool of their own, beside the trainer's 2 slots
    standalone = load_config(compose_config("ppo_trainer", ["trainer.n_gpus_per_node=2", *STANDALONE]))
    assert get_placement(standalone).slots(standalone) == 2 + 2
