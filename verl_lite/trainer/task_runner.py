"""``TaskRunner``: the remote controller that builds everything a run needs, trains, and cleans up."""

from __future__ import annotations

import threading
from typing import Any

import ray

from verl_lite.trainer.config import PPOConfig


def build_resource_manager(config: PPOConfig):
    """The policy pool (critic and reward model colocated in its processes), and in the standalone placement
    the rollout's own pool of ``rollout.nnodes`` x ``rollout.n_gpus_per_node`` slots."""
    from verl_lite.single_controller.ray import ResourcePoolManager, Role

    spec = {"global_pool": [config.trainer.n_gpus_per_node] * config.trainer.nnodes}
    mapping = {Role.Actor: "global_pool", Role.Rollout: "global_pool"}
    rollout = config.actor_rollout_ref.rollout
    if rollout.mode == "standalone":
        spec["rollout_pool"] = [rollout.n_gpus_per_node] * rollout.nnodes
        mapping[Role.Rollout] = "rollout_pool"
    if config.use_critic:
        mapping[Role.Critic] = "global_pool"
    if config.reward.reward_model.enable:
        mapping[Role.RewardModel] = "global_pool"
    return ResourcePoolManager(resource_pool_spec=spec, mapping=mapping)


def build_worker_groups(config: PPOConfig, manager):
    """The policy (actor [+ ref]), the rollout servers, the critic (gae) and reward model when used, and
    the agent-loop manager that drives the servers.

    Every role on the policy pool shares one process per slot (colocated): in the hybrid placement that
    includes the rollout server, which then receives the weights in place. Standalone servers are restarted
    by Ray when their process dies (``rollout.max_restarts``) and recover through a ``RecoveryBoard``.
    """
    from verl_lite.single_controller.ray import (
        RayClassWithInitArgs,
        RayWorkerGroup,
        Role,
        create_colocated_worker_cls,
    )
    from verl_lite.trainer.ppo.trainer_base import WorkerGroups
    from verl_lite.workers.agent_loop.manager import AgentLoopManager
    from verl_lite.workers.critic import CriticWorker
    from verl_lite.workers.policy import PolicyWorker
    from verl_lite.workers.reward_model import RewardModelWorker
    from verl_lite.workers.rollout.recovery import RecoveryBoard
    from verl_lite.workers.rollout.worker import RolloutWorker

    arr = config.actor_rollout_ref
    hybrid = arr.rollout.mode == "hybrid"
    recovery = None if hybrid else RecoveryBoard.remote()
    roles = {
        "actor": RayClassWithInitArgs(
            PolicyWorker, config=arr, role="actor_ref" if config.use_reference else "actor"
        )
    }
    rollout_cls = RayClassWithInitArgs(
        RolloutWorker,
        config=arr,
        sleeps_between_steps=hybrid and arr.rollout.free_cache_engine,
        recovery=recovery,
    )
    if hybrid:
        roles["rollout"] = rollout_cls
    if config.use_critic:
        roles["critic"] = RayClassWithInitArgs(CriticWorker, config=config.critic)
    if config.reward.reward_model.enable:
        roles["rm"] = RayClassWithInitArgs(
            RewardModelWorker,
            config=config.reward,
            policy_tokenizer_path=config.model.tokenizer_path or config.model.path,
        )
    colocated = RayWorkerGroup(manager.get_resource_pool(Role.Actor), create_colocated_worker_cls(roles))
    groups = colocated.spawn(set(roles))
    if hybrid:
        rollout = groups["rollout"]
    else:
        rollout = RayWorkerGroup(
            manager.get_resource_pool(Role.Rollout),
            rollout_cls,
            name_prefix="rollout",
            max_restarts=arr.rollout.max_restarts,
        )
    # Agent-loop worker actors, where there are any, start (imports, tokenizer) while the models load
    # below, instead of before the first generation; they only hold the servers' handles until then.
    agent_loop = AgentLoopManager(arr, config.reward, rollout, recovery)
    try:
        for name in roles:
            groups[name].init_model()
        if not hybrid:
            rollout.init_model()
    except BaseException:
        agent_loop.shutdown()
        raise
    return WorkerGroups(
        actor=groups["actor"],
        rollout=rollout,
        agent_loop=agent_loop,
        critic=groups.get("critic"),
        reward_model=groups.get("rm"),
    )


def build_dataset(config: PPOConfig, tokenizer, split: str):
    """The training or validation prompts as an ``RLHFDataset``."""
    from verl_lite.data.rl_dataset import RLHFDataset

    data = config.data
    dataset = RLHFDataset(
        data.train_files if split == "train" else data.val_files,
        tokenizer,
        prompt_key=data.prompt_key,
        max_prompt_length=data.max_prompt_length,
        filter_overlong_prompts=data.filter_overlong_prompts,
        truncation=data.truncation,
        default_data_source=data.default_data_source,
        split=split,
    )
    if not len(dataset):  # all rows skipped once tokenized (overlong); the other reasons fail before Ray
        skipped = ", ".join(f"{entry['count']} {reason}" for reason, entry in dataset.skipped.items())
        raise ValueError(
            f"data.{split}_files: 0 usable rows ({skipped} skipped; prompts above "
            f"data.max_prompt_length={data.max_prompt_length} tokens count as overlong_prompt)."
        )
    return dataset


@ray.remote(num_cpus=0, max_concurrency=2)  # the second thread answers request_stop while run runs
class TaskRunner:
    """Runs on the cluster: tokenizer, datasets, pools, workers, KV store, replay buffer, trainer."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._trainer = None

    def request_stop(self) -> bool:
        """Have the trainer stop before its next step; returns whether it is writing a checkpoint now."""
        self._stop.set()
        return bool(getattr(self._trainer, "saving", False))

    def run(self, config_dict: dict) -> list[dict[str, Any]]:
        from transformers import AutoTokenizer

        import verl_lite.trainer.modes  # noqa: F401  register the built-in modes
        from verl_lite.data.rl_dataset import PromptBatches
        from verl_lite.kv import init_kv_store, shutdown_kv_store
        from verl_lite.trainer.ppo.replay_buffer import ReplayBuffer, ReplayBufferConfig
        from verl_lite.trainer.ppo.trainer_base import get_trainer_cls
        from verl_lite.trainer.tracking import Tracker
        from verl_lite.utils.config import from_config
        from verl_lite.utils.extensions import load_extensions

        config = from_config(PPOConfig, config_dict)
        load_extensions(config.trainer.extensions)
        manager = None
        groups = None
        kv_started = False
        try:
            tokenizer = AutoTokenizer.from_pretrained(config.model.tokenizer_path or config.model.path)
            train = build_dataset(config, tokenizer, "train")
            val = build_dataset(config, tokenizer, "val") if config.data.val_files else None
            batches = PromptBatches(
                train, config.data.train_batch_size, shuffle=config.data.shuffle, seed=config.data.seed
            )
            kv = init_kv_store(config.kv, client_name="controller")
            kv_started = True
            manager = build_resource_manager(config)
            manager.create_resource_pool()
            groups = build_worker_groups(config, manager)
            buffer = ReplayBuffer(ReplayBufferConfig.from_ppo_config(config), client=kv)
            tracker = Tracker(
                config.trainer.logger,
                config.trainer.run_path,
                config.trainer.project_name,
                config.trainer.experiment_name,
                config_dict,
            )
            trainer = get_trainer_cls(config.trainer.mode)(config, groups, kv, buffer, batches, val, tracker)
            trainer.stop_requested = self._stop.is_set
            self._trainer = trainer
            return trainer.fit()
        finally:
            if groups is not None:
                groups.agent_loop.shutdown()
                for group in {
                    id(g): g for g in (groups.actor, groups.rollout, groups.critic, groups.reward_model) if g
                }.values():
                    group.kill()
            if manager is not None:
                manager.release()
            if kv_started:
                shutdown_kv_store(config.kv.name_prefix)
