"""Where the rollout servers run, as objects: each placement builds the worker groups and the weight path.

* ``hybrid``: the servers live in the actor's processes (one per policy slot). A weight sync is one call:
  every server takes the weights from the actor in its own process (``naive`` checkpoint engine).
* ``standalone``: the servers have a resource pool of their own and survive their process dying (Ray
  restarts them, a ``RecoveryBoard`` gives the replacement the latest weights). A weight sync sends the
  weights through the object store (``ray`` engine): the actor publishes them, then every server loads them.

Trainer modes declare the placement they need (``PPOTrainer.placement``); ``rollout.mode`` left null
takes it, and ``rollout.checkpoint_engine`` left null takes the placement's engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from verl_lite.utils.metrics import Metric
from verl_lite.utils.registry import Registry

if TYPE_CHECKING:
    from verl_lite.trainer.config import PPOConfig
    from verl_lite.trainer.ppo.trainer_base import WorkerGroups


class Placement:
    """How the rollout servers sit next to the policy: the pools, the worker groups and the weight sync."""

    # the checkpoint engine this placement syncs weights through when rollout.checkpoint_engine is null
    checkpoint_engine: ClassVar[str]
    # where the checkpoint engine must hand weights over (CheckpointEngine.placement)
    engine_placement: ClassVar[str]
    # whether the rollout servers are on a pool of their own
    own_pool: ClassVar[bool]

    def slots(self, config: PPOConfig) -> int:
        """Slots of every resource pool this placement asks for: the policy's, and the rollout's own."""
        slots = config.trainer.nnodes * config.trainer.n_gpus_per_node
        if self.own_pool:
            rollout = config.actor_rollout_ref.rollout
            slots += rollout.nnodes * rollout.n_gpus_per_node
        return slots

    def resource_manager(self, config: PPOConfig):
        """The policy pool (critic and reward model colocated in its processes), plus the rollout's own pool
        of ``rollout.nnodes`` x ``rollout.n_gpus_per_node`` slots where the placement has one."""
        from verl_lite.single_controller.ray import ResourcePoolManager, Role

        spec = {"global_pool": [config.trainer.n_gpus_per_node] * config.trainer.nnodes}
        mapping = {Role.Actor: "global_pool", Role.Rollout: "global_pool"}
        rollout = config.actor_rollout_ref.rollout
        if self.own_pool:
            spec["rollout_pool"] = [rollout.n_gpus_per_node] * rollout.nnodes
            mapping[Role.Rollout] = "rollout_pool"
        if config.use_critic:
            mapping[Role.Critic] = "global_pool"
        if config.reward.reward_model.enable:
            mapping[Role.RewardModel] = "global_pool"
        return ResourcePoolManager(resource_pool_spec=spec, mapping=mapping)

    def build_worker_groups(self, config: PPOConfig, manager) -> WorkerGroups:
        """The policy (actor [+ ref]), the rollout servers, the critic and reward model when used, and the
        agent-loop manager that drives the servers; every model loaded.

        Every role on the policy pool shares one process per slot (colocated).
        """
        from verl_lite.single_controller.ray import RayWorkerGroup, Role, create_colocated_worker_cls
        from verl_lite.trainer.ppo.trainer_base import WorkerGroups
        from verl_lite.workers.agent_loop.manager import AgentLoopManager

        recovery = self._recovery_board()
        rollout_cls = self._rollout_cls(config, recovery)
        roles = _policy_roles(config, None if self.own_pool else rollout_cls)
        colocated = RayWorkerGroup(manager.get_resource_pool(Role.Actor), create_colocated_worker_cls(roles))
        groups = colocated.spawn(set(roles))
        rollout = (
            groups["rollout"] if not self.own_pool else self._rollout_group(config, manager, rollout_cls)
        )
        # Agent-loop worker actors, where there are any, start (imports, tokenizer) while the models load
        # below, instead of before the first generation; they only hold the servers' handles until then.
        agent_loop = AgentLoopManager(config.actor_rollout_ref, config.reward, rollout, recovery)
        try:
            for name in roles:
                groups[name].init_model()
            if self.own_pool:
                rollout.init_model()
        except BaseException:
            agent_loop.shutdown()
            raise
        return WorkerGroups(
            actor=groups["actor"],
            rollout=rollout,
            agent_loop=agent_loop,
            placement=self,
            critic=groups.get("critic"),
            reward_model=groups.get("rm"),
            actor_value_head=config.actor_rollout_ref.actor.value_head.enable,
        )

    def sync_weights(
        self, groups: WorkerGroups, version: int, between_aborts: bool = False
    ) -> list[dict[str, Metric]]:
        """The actor's weights to every rollout server as ``version``; each server's metric records.

        ``between_aborts``: cut the generations in flight short first and let them go on after (partial
        rollout, ``AgentLoopManager.receive_weights_between_aborts``).
        """
        raise NotImplementedError

    def _recovery_board(self):
        return None

    def _rollout_cls(self, config: PPOConfig, recovery: Any):
        from verl_lite.single_controller.ray import RayClassWithInitArgs
        from verl_lite.workers.rollout.worker import RolloutWorker

        arr = config.actor_rollout_ref
        return RayClassWithInitArgs(
            RolloutWorker,
            config=arr,
            sleeps_between_steps=not self.own_pool and arr.rollout.free_cache_engine,
            recovery=recovery,
        )

    def _rollout_group(self, config: PPOConfig, manager, rollout_cls):
        raise NotImplementedError


PLACEMENTS: Registry[Placement] = Registry("rollout placement")


@PLACEMENTS.register("hybrid")
class HybridPlacement(Placement):
    """Rollout servers in the actor's processes; the weights change hands in place, in one call."""

    checkpoint_engine = "naive"
    engine_placement = "colocated"
    own_pool = False

    def sync_weights(
        self, groups: WorkerGroups, version: int, between_aborts: bool = False
    ) -> list[dict[str, Metric]]:
        # each server pulls from the actor in its own process: nothing to send beforehand
        return groups.agent_loop.receive_weights(None, version)


@PLACEMENTS.register("standalone")
class StandalonePlacement(Placement):
    """Rollout servers on a pool of their own, restarted by Ray when their process dies."""

    checkpoint_engine = "ray"
    engine_placement = "standalone"
    own_pool = True

    def sync_weights(
        self, groups: WorkerGroups, version: int, between_aborts: bool = False
    ) -> list[dict[str, Metric]]:
        handle = groups.actor.send_weights(version)
        if between_aborts:
            return groups.agent_loop.receive_weights_between_aborts(handle, version)
        return groups.agent_loop.receive_weights(handle, version)

    def _recovery_board(self):
        from verl_lite.workers.rollout.recovery import RecoveryBoard

        return RecoveryBoard.remote()

    def _rollout_group(self, config: PPOConfig, manager, rollout_cls):
        from verl_lite.single_controller.ray import RayWorkerGroup, Role

        return RayWorkerGroup(
            manager.get_resource_pool(Role.Rollout),
            rollout_cls,
            name_prefix="rollout",
            max_restarts=config.actor_rollout_ref.rollout.max_restarts,
        )


def get_placement(config: PPOConfig) -> Placement:
    """The placement object of a resolved config (``rollout.mode``)."""
    return PLACEMENTS.get(config.actor_rollout_ref.rollout.mode)()


def resolve_placement_defaults(config: PPOConfig) -> PPOConfig:
    """Fill ``rollout.mode`` from what ``trainer.mode`` needs, and ``rollout.checkpoint_engine`` from the
    placement, where the user left them null; explicit values stay as given (validation checks them)."""
    from verl_lite.trainer.ppo.trainer_base import TRAINERS

    rollout = config.actor_rollout_ref.rollout
    if rollout.mode is None:
        mode = config.trainer.mode
        rollout.mode = TRAINERS.get(mode).placement if mode in TRAINERS else "hybrid"
    if rollout.checkpoint_engine is None and rollout.mode in PLACEMENTS:
        rollout.checkpoint_engine = PLACEMENTS.get(rollout.mode).checkpoint_engine
    return config


def _policy_roles(config: PPOConfig, rollout_cls: Any) -> dict:
    """The roles that share the policy pool's processes: actor [+ ref], the rollout when given (hybrid),
    critic and reward model when used."""
    from verl_lite.single_controller.ray import RayClassWithInitArgs
    from verl_lite.workers.critic import CriticWorker
    from verl_lite.workers.policy import PolicyWorker
    from verl_lite.workers.reward_model import RewardModelWorker

    arr = config.actor_rollout_ref
    roles = {
        "actor": RayClassWithInitArgs(
            PolicyWorker,
            config=arr,
            role="actor_ref" if config.use_reference else "actor",
            rollout_correction=config.algorithm.rollout_correction,
        )
    }
    if rollout_cls is not None:
        roles["rollout"] = rollout_cls
    if config.use_critic:
        roles["critic"] = RayClassWithInitArgs(CriticWorker, config=config.critic)
    if config.reward.reward_model.enable:
        roles["rm"] = RayClassWithInitArgs(
            RewardModelWorker,
            config=config.reward,
            policy_tokenizer_path=config.model.tokenizer_path or config.model.path,
        )
    return roles


__all__ = [
    "PLACEMENTS",
    "HybridPlacement",
    "Placement",
    "StandalonePlacement",
    "get_placement",
    "resolve_placement_defaults",
]
