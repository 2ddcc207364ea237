"""CoMLRL's trainers (MAGRPO, MAREINFORCE, MAReMax, MARLOO, IAC, MAAC) and their Python entry (``train()`` /
``evaluate()``) on the Ray single controller.

The calling process is the controller: it starts (or joins) Ray, one KV store, and one policy worker
group set per agent (or one shared by all), then runs :class:`MultiAgentLoop` one update per
``rollout_buffer_size`` tasks.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from verl_lite.trainer.checkpoint import (
    CheckpointWriter,
    controller_rng_state,
    load_policies,
    load_trainer_state,
    prune_checkpoints,
    restore_controller_rng,
    save_policies,
    unique_groups,
)
from verl_lite.trainer.multi_agent.callbacks import agent_formatters, eval_due
from verl_lite.trainer.multi_agent.checkpointing import checkpoint_to_resume
from verl_lite.trainer.multi_agent.config import (
    ActorCriticConfig,
    IACConfig,
    MAACConfig,
    MAGRPOConfig,
    MAREINFORCEConfig,
    MAReMaxConfig,
    MARLOOConfig,
    MultiAgentConfig,
)
from verl_lite.trainer.multi_agent.loop import Agent, MultiAgentLoop, TaskFunctions
from verl_lite.trainer.multi_agent.metrics_log import MetricsLogger
from verl_lite.trainer.runtime import Runtime, ppo_env_vars


def agent_ppo_config(
    args: MultiAgentConfig,
    model_path: str | None,
    groups_per_node: int,
    estimator: str,
    tokenizer_path: str | None = None,
    critic_path: str | None = None,
):
    """The validated verl_lite config of one agent's policy, from ``configs/ppo_trainer.yaml``
    (``estimator`` gae brings the policy a critic of its own).

    ``groups_per_node`` is how many prompt groups one node of a task's joint tree brings the policy (the
    agents sharing it). A mini-batch holds ``train_batch_size`` nodes' groups (CoMLRL's ``train_batch_size``
    counts its tree's nodes), so with one turn an update on a full buffer makes
    ceil(rollout_buffer_size / train_batch_size) optimizer steps, and more with several turns.
    """
    from verl_lite.trainer.load import compose_config, load_ppo_config

    top_k = args.top_k if args.top_k is not None else -1
    mini_batch = groups_per_node * args.train_batch_size
    steps = -(-args.rollout_buffer_size // args.train_batch_size)
    overrides = [
        f"data.train_batch_size={mini_batch * steps}",
        f"data.max_response_length={args.max_new_tokens}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={mini_batch}",
        f"actor_rollout_ref.actor.optim.lr={args.agent_learning_rate}",
        f"actor_rollout_ref.rollout.n={args.num_generations}",
        f"actor_rollout_ref.rollout.temperature={args.temperature}",
        f"actor_rollout_ref.rollout.top_p={args.top_p}",
        f"actor_rollout_ref.rollout.top_k={top_k}",
        f"actor_rollout_ref.rollout.val_kwargs.temperature={args.temperature}",
        f"actor_rollout_ref.rollout.val_kwargs.top_p={args.top_p}",
        f"actor_rollout_ref.rollout.val_kwargs.top_k={top_k}",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
        f"actor_rollout_ref.engine.seed={args.seed}",
        f"algorithm.adv_estimator={estimator}",
        f"algorithm.norm_adv_by_std_in_grpo={args.advantage_normalization}",
        "trainer.val_before_train=false",
    ]
    if model_path:
        overrides.append(f"actor_rollout_ref.model.path={model_path}")
    if tokenizer_path:
        overrides.append(f"actor_rollout_ref.model.tokenizer_path={tokenizer_path}")
    if critic_path:
        overrides.append(f"critic.model.path={critic_path}")
    if isinstance(args, MAGRPOConfig):
        overrides.append(f"algorithm.return_baseline={args.advantage_mode}")
    if isinstance(args, ActorCriticConfig) and args.shared_value_head:
        overrides += [
            "actor_rollout_ref.actor.value_head.enable=true",
            f"actor_rollout_ref.actor.value_head.hidden_dim={_yaml(args.value_head_hidden_dim)}",
            # CoMLRL's value loss is the squared error; verl_lite's (as verl's) is half of it
            f"actor_rollout_ref.actor.value_head.loss_coef={2 * args.value_loss_coef}",
            f"actor_rollout_ref.actor.value_head.cliprange_value={_yaml(args.value_clip_range)}",
        ]
    elif isinstance(args, ActorCriticConfig):
        overrides += [
            f"critic.critic.optim.lr={args.critic_learning_rate}",
            # CoMLRL clips the value update of a head on the actor only; a separate critic's is unclipped
            "critic.critic.cliprange_value=null",
        ]
    if args.reference_kl_enabled:  # CoMLRL's penalty: exp(r) - r - 1 per token, r = log ref - log policy
        overrides += [
            "algorithm.use_kl_in_reward=true",
            "algorithm.kl_penalty=low_var_kl",
            f"algorithm.kl_ctrl.kl_coef={args.reference_kl_coef}",
        ]
    return load_ppo_config(compose_config("ppo_trainer", [*overrides, *args.overrides]))


def _yaml(value: Any) -> str:
    """``value`` as a Hydra override's right-hand side (None is ``null``)."""
    return "null" if value is None else str(value)


class MAGRPOTrainer:
    """Multi-agent GRPO with CoMLRL 1.4's arguments, each agent's policy in its own Ray worker groups.

    Args:
        agent_model: a model folder shared by every agent (each gets its own copy unless
            ``args.shared_policy``), or None for the embedded tiny model (or with ``agents``).
        agents: model folders in agent order (CoMLRL's heterogeneous agents); sets ``num_agents``.
        num_agents: number of agents (overrides ``args.num_agents`` when given).
        tokenizer: a loaded tokenizer (or one per agent) whose ``name_or_path`` replaces the model's own.
        model_config: CoMLRL's loading options (dtype, attention); verl_lite's engine config decides
            these, so they are accepted with a notice.
        train_dataset, eval_dataset: Hugging Face ``Dataset``/``IterableDataset`` or lists of dict rows.
        reward_func: ``(agent0_completions, agent1_completions, ..., *, batch_items) -> [reward]``, called
            once per joint answer with one answer per list (as CoMLRL); ``batch_items`` (the task item, as
            a one-element list) only when it accepts it.
        reward_processor: applied to each reward before training (``RewardProcessors.scale(10.0)``).
        formatters: one formatter shared by all agents or a list in agent order; ``item -> prompt text``,
            optionally taking ``external_prompts`` for turns after the first.
        external_transition: for ``num_turns > 1``, CoMLRL's ``(prompt=, agent_completions=, num_agents=,
            prompt_history_per_agent=, response_history_per_agent=)`` -> one external prompt per agent
            (default: each agent's own previous answer).
        wandb_config: ``project``, ``entity``, ``name``/``run_name``, ``tags``, ``dir``,
            ``config_sections`` (``output.verbose`` switches progress printing); None turns W&B off.
        eval_logger, eval_aggregator: custom evaluation metrics (both or neither), see the docs.
        args: the run's settings (default: ``default_config_cls()``).
        metrics_callback: verl_lite's ``(rollouts) -> {name: number}`` on every task's answers.
    """

    # the settings class a trainer is built with when args is None, and the one args must be
    default_config_cls: type[MultiAgentConfig] = MAGRPOConfig
    # the settings family args must belong to
    args_cls: type[MultiAgentConfig] = MAGRPOConfig
    # True: one critic for all agents (MAAC) instead of one per policy
    centralised_critic = False

    def __init__(
        self,
        agent_model: str | None = None,
        agents: Sequence[str] | None = None,
        num_agents: int | None = None,
        tokenizer: Any = None,
        model_config: dict[str, Any] | None = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        reward_func: Callable | None = None,
        reward_processor: Callable[[float], float] | None = None,
        formatters: Callable | Sequence[Callable] | None = None,
        external_transition: Callable | None = None,
        wandb_config: dict | None = None,
        eval_logger: Callable | None = None,
        eval_aggregator: Callable | None = None,
        args: MultiAgentConfig | None = None,
        metrics_callback: Callable | None = None,
        critics: Sequence[str] | None = None,
    ):
        cls_name = type(self).__name__
        args = args if args is not None else self.default_config_cls()
        if not isinstance(args, self.args_cls):
            raise ValueError(
                f"{cls_name} got args of type {type(args).__name__}; pass a {self.args_cls.__name__}."
            )
        if agents is not None:
            if agent_model is not None:
                raise ValueError(f"{cls_name} got both agent_model and agents; pass one of them.")
            agent_model = list(agents)
            num_agents = num_agents if num_agents is not None else len(agent_model)
        if num_agents is not None and num_agents != args.num_agents:
            args = replace(args, num_agents=num_agents)
        if reward_func is None:
            raise ValueError(f"{cls_name} needs reward_func (one reward per aligned tuple of completions).")
        if (eval_logger is None) != (eval_aggregator is None):
            raise ValueError("eval_logger and eval_aggregator go together; pass both or neither.")
        if train_dataset is None:
            raise ValueError(f"{cls_name} needs train_dataset (rows that are dicts, e.g. with a 'prompt').")
        models = (
            list(agent_model) if isinstance(agent_model, (list, tuple)) else [agent_model] * args.num_agents
        )
        if len(models) != args.num_agents:
            raise ValueError(
                f"agents lists {len(models)} models for num_agents={args.num_agents}; give one shared "
                f"agent_model or exactly {args.num_agents}."
            )
        models = _model_folders(models, cls_name)
        if args.shared_policy and len(set(models)) > 1:
            raise ValueError(
                "args.shared_policy=True needs one agent_model for all agents, not a list of several."
            )
        if model_config:
            warnings.warn(
                f"{cls_name}: model_config keys {sorted(model_config)} ignored; the dtype and attention come "
                "from actor_rollout_ref.engine / model in args.overrides.",
                stacklevel=2,
            )
        self.args = args
        self.models = models
        self.tokenizer_paths = _per_agent(tokenizer, args.num_agents, "tokenizer")
        self.critic_paths = (
            [None] * args.num_agents if critics is None else _per_agent(critics, args.num_agents, "critics")
        )
        self.formatters = agent_formatters(formatters, args.num_agents)
        self.functions = TaskFunctions(
            reward_func, reward_processor, external_transition, eval_logger, eval_aggregator, metrics_callback
        )
        self.train_dataset = train_dataset
        self.eval_dataset = eval_dataset
        self.wandb_config = wandb_config
        self.env_step = 0
        # training tasks and whole epochs finished (restored by load_checkpoint)
        self.tasks_done = 0
        self.epochs_done = 0
        self.history: list[dict[str, float]] = []
        self.eval_history: list[dict[str, float]] = []
        # metrics_callback's training values, one entry per task
        self.rollout_history: list[dict[str, float]] = []
        # what _start started, ended by close()
        self._runtime: Runtime | None = None
        self._loop: MultiAgentLoop | None = None
        self._logger: MetricsLogger | None = None

    @property
    def estimator(self) -> str:
        """The advantage estimator of every policy: CoMLRL's return baseline, or GAE with a critic."""
        if isinstance(self.args, ActorCriticConfig):
            return "gae"
        return "joint_return"

    # ---- public API -----------------------------------------------------------------------------
    def train(
        self,
        resume_from_checkpoint: str | bool | None = None,
        checkpoint_dir: str | None = None,
        checkpoint_interval: int = 1,
        checkpoint_total_limit: int | None = None,
    ) -> list[dict[str, float]]:
        """Every epoch over the training tasks in order, evaluating on schedule; returns the logged metrics.

        Args:
            resume_from_checkpoint: a checkpoint folder to continue from (True: the newest complete one
                under ``checkpoint_dir``); ``num_train_epochs`` counts the epochs done before it too.
            checkpoint_dir: where a checkpoint is written after every ``checkpoint_interval`` epochs
                (``global_step_<tasks done>/``, verl_lite's layout); None writes none.
            checkpoint_total_limit: how many of them to keep (None: all).
        """
        resume = checkpoint_to_resume(
            resume_from_checkpoint, checkpoint_dir, checkpoint_interval, checkpoint_total_limit
        )
        if resume is not None:
            self.load_checkpoint(resume)
        else:  # CoMLRL: train() without a checkpoint runs all num_train_epochs again
            self.epochs_done = 0
            self._start()
        rows = _rows(self.train_dataset)
        size = self.args.rollout_buffer_size
        for epoch in range(self.epochs_done, self.args.num_train_epochs):
            # as CoMLRL: an update once the buffer holds rollout_buffer_size tasks, and one on what is left
            # at the end of the epoch, so every epoch (and checkpoint) ends with the buffer empty
            for index in range(0, len(rows), size):
                self.train_step(epoch, index, rows[index : index + size])
            self.epochs_done = epoch + 1
            if checkpoint_dir is not None and self.epochs_done % checkpoint_interval == 0:
                self.save_checkpoint(checkpoint_dir)
                prune_checkpoints(checkpoint_dir, checkpoint_total_limit)
        return self.history

    def train_step(self, epoch: int, index: int, items: list[dict[str, Any]]) -> dict[str, float]:
        """One update on the training tasks ``items`` (from position ``index`` of ``epoch``): their joint
        trees, the evaluations due before each of them, the update, the logs; returns its metrics."""
        loop, logger = self._start()
        rollout = loop.rollout(items, self.tasks_done + len(items))
        # each task's env_steps are known now; the weights have not moved, so the evaluations due before
        # tasks of this buffer run now, each logged at the env_step its task starts at
        starts = [self.env_step + sum(rollout.env_steps[:j]) for j in range(len(items) + 1)]
        if self.eval_dataset is not None:
            for j in range(len(items)):
                if eval_due(self.tasks_done + j, index + j, self.args.eval_interval):
                    self._evaluate(self.args.eval_num_samples, starts[j])
        metrics = loop.update(rollout, self.tasks_done + len(items))
        for j, values in enumerate(rollout.callback_metrics):
            logger.log_rollout(values, starts[j + 1])
            if values:
                self.rollout_history.append({"env_step": starts[j + 1], **values})
        self.env_step = starts[-1]
        self.tasks_done += len(items)
        metrics.update(epoch=float(epoch), task=float(self.tasks_done))
        if logger.log_train(metrics, self.env_step):
            self.history.append({"env_step": self.env_step, **metrics})
        return metrics

    # ---- checkpoints ----------------------------------------------------------------------------
    def save_checkpoint(self, checkpoint_dir: str) -> str:
        """Every policy's shards and the run's progress as ``global_step_<tasks done>``; returns its path."""
        loop, logger = self._start()
        writer = CheckpointWriter(checkpoint_dir, self.tasks_done)
        save_policies(writer, self._policy_groups())
        writer.save_trainer_state(
            {
                "args": type(self.args).__name__,
                "num_agents": self.args.num_agents,
                "global_step": self.tasks_done,
                "epochs_done": self.epochs_done,
                "env_step": self.env_step,
                "history": self.history,
                "eval_history": self.eval_history,
                "rollout_history": self.rollout_history,
                "loop": loop.state_dict(),
                "logger": logger.state_dict(),
                "rng": controller_rng_state(),
            }
        )
        return writer.publish()

    def load_checkpoint(self, path: str) -> None:
        """Continue from checkpoint ``path`` (written by :meth:`save_checkpoint` with the same config class
        and agent count): weights, optimizers, progress, logs and RNG, as right after it was written."""
        state = load_trainer_state(path)
        kind = (type(self.args).__name__, self.args.num_agents)
        if (state["args"], state["num_agents"]) != kind:
            raise ValueError(
                f"resume_from_checkpoint={path!r} holds a run with a {state['args']} of "
                f"{state['num_agents']} agents; this one has a {kind[0]} of {kind[1]}: resume it with those."
            )
        loop, logger = self._start()
        loop.load_state_dict(state["loop"])
        load_policies(path, self._policy_groups())
        for groups in self._policy_groups():  # each rollout serves the restored weights, as after the update
            groups.sync_weights(loop.version)
        self.tasks_done, self.epochs_done = int(state["global_step"]), int(state["epochs_done"])
        self.env_step = int(state["env_step"])
        self.history = list(state["history"])
        self.eval_history = list(state["eval_history"])
        self.rollout_history = list(state["rollout_history"])
        logger.load_state_dict(state["logger"])
        restore_controller_rng(state["rng"])

    def save_model(self, output_dir: str) -> None:
        """Each agent's trained policy as a Hugging Face folder (with its tokenizer) in
        ``output_dir/agent_<i>``, CoMLRL's layout (agents sharing one policy get copies of its weights)."""
        loop, _ = self._start()
        exported: dict[int, str] = {}  # id(policy groups) -> the folder its weights were exported to
        with tempfile.TemporaryDirectory(prefix="save_model_") as shards:
            for i, agent in enumerate(loop.agents):
                folder = os.path.abspath(os.path.join(output_dir, f"agent_{i}"))
                done = exported.get(id(agent.groups))
                if done is not None:
                    shutil.copytree(done, folder, dirs_exist_ok=True)
                    continue
                agent.groups.actor.save_checkpoint(os.path.join(shards, f"agent_{i}"), hf_path=folder)
                exported[id(agent.groups)] = folder

    def _policy_groups(self) -> list[Any]:
        return unique_groups([agent.groups for agent in self._loop.agents])

    def evaluate(self, num_eval_samples: int | None = None) -> dict[str, float]:
        """One answer per agent per turn on the first ``num_eval_samples`` eval tasks (default
        ``args.eval_num_samples``, else all); the ``eval/`` metrics, also saved as local JSON. ``{}`` without
        an eval set."""
        if self.eval_dataset is None:
            return {}
        limit = num_eval_samples if num_eval_samples is not None else self.args.eval_num_samples
        if limit is not None and limit < 1:
            raise ValueError(
                f"num_eval_samples is {limit}; use a positive task count or None (all eval tasks)."
            )
        return self._evaluate(limit, self.env_step)

    def _evaluate(self, limit: int | None, env_step: int) -> dict[str, float]:
        """:meth:`evaluate` on the first ``limit`` eval tasks, logged at ``env_step``."""
        items = _rows(self.eval_dataset, limit)
        if not items:
            return {}
        loop, logger = self._start()
        metrics, records = loop.evaluate(items, env_step)
        logger.log_eval(metrics, env_step, records)
        self.eval_history.append({"env_step": env_step, **metrics})
        return metrics

    def close(self) -> None:
        """End the workers, the KV store and the Ray instance this trainer started."""
        runtime, self._runtime = self._runtime, None
        if runtime is not None:
            runtime.close()

    def __enter__(self) -> MAGRPOTrainer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- setup ----------------------------------------------------------------------------------
    def _start(self) -> tuple[MultiAgentLoop, MetricsLogger]:
        """Ray, the KV store and every agent's workers, once (later calls reuse them)."""
        if self._runtime is not None:
            return self._loop, self._logger
        args = self.args
        policies = 1 if args.shared_policy else args.num_agents
        per_node = args.num_agents if args.shared_policy else 1
        configs = [
            agent_ppo_config(
                args,
                self.models[i],
                per_node,
                self.estimator,
                self.tokenizer_paths[i],
                self.critic_paths[i],
            )
            for i in range(policies)
        ]
        if self.centralised_critic:  # one critic for the team, in the first policy's processes
            configs = configs[:1] + [replace(c, critic=replace(c.critic, enable=False)) for c in configs[1:]]
        self._runtime = runtime = Runtime()
        try:
            runtime.start_ray(configs[0].ray_kwargs.ray_init, args.ray_num_cpus, ppo_env_vars(configs[0]))
            kv = runtime.start_kv_store(configs[0].kv)
            # every policy's worker processes start and load their models at once, while this process
            # loads the tokenizers: on 2 cores the start-up of two policies takes about the time of one
            with ThreadPoolExecutor(len(configs), thread_name_prefix="start-policy") as starter:
                started = [starter.submit(runtime.start_policy, config) for config in configs]
                from transformers import AutoTokenizer

                tokenizers = [
                    AutoTokenizer.from_pretrained(config.model.tokenizer_path or config.model.path)
                    for config in configs
                ]
                policy_groups = [future.result() for future in started]
            agents = [
                Agent(
                    policy_groups[i % policies],
                    tokenizers[i % policies],
                    configs[i % policies],
                    self.formatters[i],
                )
                for i in range(args.num_agents)
            ]
            critic = policy_groups[0].critic if self.centralised_critic else None
            self._loop = MultiAgentLoop(args, agents, kv, self.functions, critic=critic)
            self._logger = MetricsLogger(args, self.wandb_config)
            runtime.callback(self._logger.finish)
        except BaseException:
            self.close()
            raise
        return self._loop, self._logger


class MAREINFORCETrainer(MAGRPOTrainer):
    """Multi-agent REINFORCE: the joint return itself is the advantage (no baseline)."""

    default_config_cls = MAREINFORCEConfig


class MAReMaxTrainer(MAGRPOTrainer):
    """Multi-agent ReMax: the joint return minus the group's best return."""

    default_config_cls = MAReMaxConfig


class MARLOOTrainer(MAGRPOTrainer):
    """Multi-agent RLOO: the joint return minus the mean of the group's other returns."""

    default_config_cls = MARLOOConfig


class IACTrainer(MAGRPOTrainer):
    """Independent actor-critic: every agent's policy has its own critic (GAE on the joint reward).

    CoMLRL's arguments: ``critic_model`` (one folder for every critic; default: the agent's model) or
    ``critics`` (one per agent), neither with ``args.use_separate_critic=False`` (a value head on each
    agent's actor is its critic); ``metrics_callback(rollouts)`` takes the place of the eval logger (each
    rollout a :class:`~verl_lite.trainer.multi_agent.loop.RolloutSample`).
    """

    default_config_cls = IACConfig
    args_cls = ActorCriticConfig

    def __init__(
        self,
        agent_model: str | None = None,
        critic_model: str | None = None,
        tokenizer: Any = None,
        reward_func: Callable | None = None,
        reward_processor: Callable[[float], float] | None = None,
        formatters: Callable | Sequence[Callable] | None = None,
        args: ActorCriticConfig | None = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        model_config: dict[str, Any] | None = None,
        wandb_config: dict | None = None,
        metrics_callback: Callable | None = None,
        external_transition: Callable | None = None,
        agents: Sequence[str] | None = None,
        critics: Sequence[str] | None = None,
        num_agents: int | None = None,
    ):
        if critic_model is not None and critics is not None:
            raise ValueError(f"{type(self).__name__} got both critic_model and critics; pass one of them.")
        if (
            isinstance(args, ActorCriticConfig)
            and args.shared_value_head
            and (critic_model is not None or critics is not None)
        ):
            raise ValueError(
                f"{type(self).__name__} got a critic model with args.use_separate_critic=False, where each agent's "
                "critic is a value head on its actor; pass no critic_model or critics."
            )
        super().__init__(
            agent_model=agent_model,
            agents=agents,
            num_agents=num_agents,
            tokenizer=tokenizer,
            model_config=model_config,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            reward_func=reward_func,
            reward_processor=reward_processor,
            formatters=formatters,
            external_transition=external_transition,
            wandb_config=wandb_config,
            args=args,
            metrics_callback=metrics_callback,
            critics=critics if critic_model is None else [critic_model] * _count(args, agents, num_agents),
        )


class MAACTrainer(IACTrainer):
    """Multi-agent actor-critic with one centralised critic: a single value model, in the first agent's
    processes, values every agent's answers and is trained on all of them (GAE on the joint reward).

    The critic sees one agent's prompt and answer at a time (shared parameters, not a joint input).
    """

    default_config_cls = MAACConfig
    centralised_critic = True


def _model_folders(models: list[Any], cls_name: str) -> list[str | None]:
    """Each agent's model folder: a string as given, a loaded model (CoMLRL's ``agents=[model, ...]``) by its
    ``name_or_path``, with a notice that each agent's workers load their own copy from there."""
    loaded = [m for m in models if m is not None and not isinstance(m, str)]
    if not loaded:
        return models
    folders = _per_agent(models, len(models), "agents")
    warnings.warn(
        f"{cls_name}: agents given as loaded models are read from their name_or_path "
        f"({sorted({f for f in folders if f})}); each agent's workers load their own copy, so changes made "
        "to the objects in memory are not trained.",
        stacklevel=3,
    )
    return folders


def _count(args: MultiAgentConfig | None, agents: Sequence[str] | None, num_agents: int | None) -> int:
    """The number of agents the arguments ask for."""
    if num_agents is not None:
        return num_agents
    if agents is not None:
        return len(agents)
    return args.num_agents if args is not None else MultiAgentConfig.num_agents


def _per_agent(value: Any, num_agents: int, name: str) -> list[str | None]:
    """One folder (or None) per agent from a shared value or a list: strings, or tokenizers/models by their
    ``name_or_path``."""
    values = list(value) if isinstance(value, (list, tuple)) else [value] * num_agents
    if len(values) != num_agents:
        raise ValueError(
            f"{name} lists {len(values)} entries for num_agents={num_agents}; give one or {num_agents}."
        )
    out = []
    for v in values:
        path = v if v is None or isinstance(v, str) else getattr(v, "name_or_path", None)
        if v is not None and not path:
            raise ValueError(f"{name} entry {type(v).__name__} has no name_or_path; pass its folder.")
        out.append(path)
    return out


def _rows(dataset: Any, limit: int | None = None) -> list[dict[str, Any]]:
    """The dataset's rows as dicts, in order (the first ``limit`` when given)."""
    rows = []
    for row in dataset:
        if limit is not None and len(rows) >= limit:
            break
        rows.append(dict(row))
    return rows
