"""What a run starts on Ray (Ray itself, the KV store, pools and worker groups), ended in reverse on close.

``main_ppo`` (with the ``TaskRunner``), ``main_sft`` / ``main_rm`` and the multi-agent Python API all start
their resources through one :class:`Runtime`, so Ray's defaults, the workers' environment and the order
things end in are the same everywhere.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from verl_lite.kv import KVClient
    from verl_lite.trainer.config import PPOConfig
    from verl_lite.trainer.ppo.trainer_base import WorkerGroups

# Bytes of a local Ray's object store unless ray_kwargs.ray_init sets object_store_memory.
OBJECT_STORE_BYTES = 512 * 1024**2


def local_num_cpus(slots: int) -> int:
    """Logical CPUs of a local Ray for ``slots`` worker slots: two more for the actors that take no slot
    (runner, agent-loop workers), at least 4."""
    return max(4, slots + 2)


def ppo_env_vars(config: PPOConfig) -> dict[str, str]:
    """What a PPO run's worker processes find in their environment: the run's KV store and extensions."""
    from verl_lite.kv.config import NAME_PREFIX_ENV
    from verl_lite.utils.extensions import extensions_env

    # the workers' get_kv_client() finds this run's store by it
    return {NAME_PREFIX_ENV: config.kv.name_prefix, **extensions_env(extension_entries(config))}


def extension_entries(config: PPOConfig) -> list[str]:
    """What every process of the run loads: ``trainer.extensions``, then the agent-loop yaml, if any."""
    path = config.actor_rollout_ref.rollout.agent.agent_loop_config_path
    return [*config.trainer.extensions, *([path] if path else [])]


class Runtime(contextlib.ExitStack):
    """The Ray resources of one run; ``close()`` (or leaving the ``with`` block) ends them newest first.

    Anything else to end with the run is added with ``callback`` (``contextlib.ExitStack``).
    """

    owns_ray = False  # whether ``start_ray`` started the Ray it shuts down on close

    def start_ray(
        self, ray_init: dict[str, Any], num_cpus: int, env_vars: dict[str, str] | None = None
    ) -> None:
        """Start a local Ray (``num_cpus`` logical CPUs unless ``ray_init`` says otherwise), or join the
        cluster at ``ray_init["address"]``; shut down on close. A Ray already running in this process is
        used as it is (and left running).

        The run's processes get ``runtime_env`` (``ray_init``'s, with ``worker_env_vars(**env_vars)``
        added under its own env vars): as the job's when this call starts Ray, and from the actors the
        caller starts with it (``self.runtime_env``), whose children inherit it, when Ray was running.
        """
        import ray

        from verl_lite.single_controller.ray import parking
        from verl_lite.single_controller.ray.process_env import worker_env_vars

        init_kwargs = {k: v for k, v in ray_init.items() if v is not None}
        runtime_env = dict(init_kwargs.pop("runtime_env", None) or {})
        runtime_env["env_vars"] = {**worker_env_vars(**(env_vars or {})), **runtime_env.get("env_vars", {})}
        self.runtime_env = runtime_env
        if ray.is_initialized():
            return
        if "address" not in init_kwargs:
            # "local" always starts a fresh instance, even when a `ray start` cluster runs on this machine.
            init_kwargs["address"] = "local"
            init_kwargs.setdefault("num_cpus", num_cpus)
            init_kwargs.setdefault("object_store_memory", OBJECT_STORE_BYTES)
            init_kwargs.setdefault("include_dashboard", False)
        ray.init(runtime_env=runtime_env, **init_kwargs)
        self.owns_ray = True
        self.callback(ray.shutdown)
        # worker processes are kept for later runs only on a Ray that outlives this one (see parking)
        self.callback(parking.end_kept)

    def start_kv_store(self, kv_config: Any) -> KVClient:
        """A new KV store (``kv_config``: the ``kv`` group) and the controller's client of it; ended on close."""
        from verl_lite.kv import init_kv_store, shutdown_kv_store
        from verl_lite.single_controller.ray import parking

        client = init_kv_store(kv_config, client_name="controller")
        # kept, emptied, for the next run on a Ray that outlives this one (as worker processes are)
        keep_s = 0.0 if self.owns_ray else parking.KEEP_S
        self.push(
            lambda failed, *_: shutdown_kv_store(kv_config.name_prefix, keep_s=0.0 if failed else keep_s)
        )
        return client

    def start_policy(self, config: PPOConfig) -> WorkerGroups:
        """The resource pools and worker groups of one policy as ``config``'s placement builds them (every
        model loaded); the groups and the agent-loop workers are ended, the pools released, on close."""
        from verl_lite.trainer.placement import get_placement

        placement = get_placement(config)
        manager = placement.resource_manager(config)
        self.callback(manager.release)
        manager.create_resource_pool()
        groups = placement.build_worker_groups(config, manager)
        self.push(lambda failed, *_: _end_groups(groups, manager, keep=failed is None))
        return groups


def _end_groups(groups: WorkerGroups, manager: Any, keep: bool) -> None:
    """End the run's worker groups, or (``keep``: the run ended well) leave the processes that can host a
    later run's workers in their pools for it (``parking``); the pools that keep none are released next."""
    from verl_lite.single_controller.ray import parking

    groups.agent_loop.shutdown()
    # one group may fill several roles (views of one set of processes): end it once
    roles = (groups.actor, groups.rollout, groups.critic, groups.reward_model)
    unique = {tuple(map(id, g.workers)): g for g in roles if g}
    kept: dict[int, list] = {}
    for group in unique.values():
        if keep and group.keep_or_kill():
            kept.setdefault(id(group.resource_pool), []).append((group.keep_key, group.workers))
        elif not keep:
            group.kill()
    for name, pool in list(manager.resource_pool_dict.items()):
        if id(pool) in kept:
            parking.keep(pool, kept[id(pool)])
            del manager.resource_pool_dict[name]  # not released with the others


__all__ = ["OBJECT_STORE_BYTES", "Runtime", "local_num_cpus", "ppo_env_vars"]
