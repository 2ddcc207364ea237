"""Shared set-up for worker tests: groups of the policy worker and trajectories in the KV store."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict

from tests.workers.probes import InspectableActor, InspectableRollout
from verl_lite.single_controller.ray import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    create_colocated_worker_cls,
    parking,
)
from verl_lite.workers.agent_loop.manager import AgentLoopManager

PROMPTS = [[3, 4, 13, 5], [6, 14, 7], [8, 9, 15, 10, 11], [12, 13]]
RESPONSES = [[5, 6, 1], [7, 8, 9, 10], [11], [3, 4, 5, 6, 7]]
ADVANTAGES = [1.0, -1.0, 0.5, -0.5]


def actor_config(
    model_dir: str, rollout_name: str = "hf", model: dict | None = None, sections: dict | None = None, **actor
) -> dict:
    """The worker config of these tests; ``model`` adds model keys, ``sections`` whole groups' keys (rollout, ref)."""
    base = {
        "ppo_mini_batch_size": 4,
        "ppo_micro_batch_size_per_gpu": 2,
        "shuffle": False,
        "optim": {"lr": 1e-2, "grad_clip": 1.0},
    }
    base.update(actor)
    config = {
        "model": {"path": model_dir, **(model or {})},
        "actor": base,
        "rollout": {
            "name": rollout_name,
            "n": 2,
            "prompt_length": 16,
            "response_length": 6,
            # what main_ppo's placement fills in for the hybrid default
            "checkpoint_engine": "naive",
        },
    }
    for section, keys in (sections or {}).items():
        config[section] = {**config.get(section, {}), **keys}
    return config


def make_group(
    model_dir: str,
    ranks: int,
    role: str = "actor_ref",
    name: str = "actor",
    rollout_name: str = "hf",
    model: dict | None = None,
    sections: dict | None = None,
    use_gpu: bool = False,
    **actor,
):
    """A policy-worker group (actor and/or ref roles, no rollout) of ``ranks`` processes (one GPU a rank
    with use_gpu), models loaded."""
    config = actor_config(model_dir, rollout_name, model, sections, **actor)
    group = make_workers(
        "actor", RayClassWithInitArgs(InspectableActor, config=config, role=role), ranks, name, use_gpu
    )
    group.init_model()
    return group


def make_workers(
    role: str, worker: RayClassWithInitArgs, ranks: int = 1, name: str | None = None, use_gpu: bool = False
) -> RayWorkerGroup:
    """A group of ``ranks`` processes of ``worker`` (models not loaded yet), built as the ``role`` view of a
    colocated group so that ``release`` can keep its processes for the next test's group."""
    return _colocated({role: worker}, ranks, name or role, use_gpu).spawn({role})[role]


def _colocated(roles: dict, ranks: int, name: str, use_gpu: bool = False) -> RayWorkerGroup:
    """A colocated group of ``roles`` on a pool of ``ranks`` slots: in processes and a pool that an earlier
    test of this session released (``release``) when they fit (``parking``), as runs in a row share them.

    The pool's name is the same for every test (a kept pool is taken by shape, name included); ``name``
    names the group."""
    pool = RayResourcePool([ranks], use_gpu=use_gpu, name_prefix="tests_workers")
    (kept,) = parking.take_pools([pool.shape])
    return RayWorkerGroup(kept or pool, create_colocated_worker_cls(roles), name_prefix=name)


@dataclass
class Hybrid:
    """The hybrid placement: actor and rollout server colocated per process, and the agent-loop manager."""

    actor: Any
    rollout: Any
    agent_loop: Any
    colocated: Any

    def sync(self, version: int) -> list[dict]:
        return self.rollout.receive_weights(self.actor.send_weights(version), version)


def make_hybrid(
    model_dir: str,
    ranks: int,
    name: str = "hybrid",
    rollout_name: str = "hf",
    sleeps: bool = False,
    reward_config: Any = None,
    rollout: dict | None = None,
    model: dict | None = None,
    **actor,
) -> Hybrid:
    """Actor + rollout server in each of ``ranks`` processes (as main_ppo's hybrid placement builds them)."""
    config = actor_config(model_dir, rollout_name, model, **actor)
    config["rollout"].update(rollout or {})
    roles = {
        "actor": RayClassWithInitArgs(InspectableActor, config=config, role="actor"),
        "rollout": RayClassWithInitArgs(InspectableRollout, config=config, sleeps_between_steps=sleeps),
    }
    colocated = _colocated(roles, ranks, name)
    groups = colocated.spawn(set(roles))
    for role in roles:
        groups[role].init_model()
    from verl_lite.utils.config import from_config
    from verl_lite.workers.config import ActorRolloutRefConfig

    manager = AgentLoopManager(from_config(ActorRolloutRefConfig, config), reward_config, groups["rollout"])
    return Hybrid(groups["actor"], groups["rollout"], manager, colocated)


def release_hybrid(hybrid: Hybrid) -> None:
    hybrid.agent_loop.shutdown()
    release(hybrid.colocated)


def release(group) -> None:
    """End a group of ``make_group``, ``make_workers`` or ``make_hybrid``: its processes and pool are kept
    for the next test's group (``parking``, as a run's are when it ended well), or ended where they cannot
    be (a GPU pool, a worker that died)."""
    if group.keep_or_kill():
        parking.keep(group.resource_pool, [(group.keep_key, group.workers)])
    else:
        group.resource_pool.release()


def jagged(rows, dtype=torch.long) -> torch.Tensor:
    return torch.nested.nested_tensor([torch.tensor(r, dtype=dtype) for r in rows], layout=torch.jagged)


def put_trajectories(kv, old_log_probs=None):
    """Four fixed trajectories with advantages (and old log-probs when given)."""
    fields = {
        "prompts": jagged(PROMPTS),
        "responses": jagged(RESPONSES),
        "advantages": jagged([[a] * len(r) for a, r in zip(ADVANTAGES, RESPONSES)], torch.float32),
    }
    if old_log_probs is not None:
        fields["old_log_probs"] = old_log_probs
    keys = [f"u{i}_0_0" for i in range(len(PROMPTS))]
    return kv.kv_batch_put(
        keys,
        "train",
        fields=TensorDict(fields, batch_size=[len(keys)]),
        tags=[{"uid": f"u{i}"} for i in range(len(keys))],
    )
