"""The ``magrpo``, ``iac`` and ``maac`` trainer modes: CoMLRL's trainers driven from Hydra
(``python -m verl_lite.main_ppo trainer.mode=magrpo``).

The run's policy (built by the ``TaskRunner``) serves every agent, or with ``multi_agent.agents`` agent 0,
each other agent getting worker groups of its own. Tasks are the original rows of ``data.train_files`` /
``val_files``; formatters, the reward function and the external transition are functions named by file,
like ``reward.custom_reward_function``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from verl_lite.trainer.checkpoint import unique_groups
from verl_lite.trainer.multi_agent.callbacks import RewardProcessors, agent_formatters, eval_due
from verl_lite.trainer.multi_agent.config import (
    AgentEntry,
    FunctionRef,
    IACConfig,
    MAACConfig,
    MAGRPOConfig,
    MultiAgentConfig,
)
from verl_lite.trainer.multi_agent.loop import Agent, MultiAgentLoop, TaskFunctions
from verl_lite.trainer.multi_agent.metrics_log import MetricsLogger
from verl_lite.trainer.ppo.trainer_base import PPOTrainer, WorkerGroups, register_trainer
from verl_lite.trainer.runtime import Runtime
from verl_lite.utils.extensions import function_from_file


def load_function(ref: FunctionRef, key: str) -> Any:
    """The function ``ref.name`` of the file ``ref.path`` (``key`` names the config key in errors)."""
    return function_from_file(ref.path, ref.name, key)


def magrpo_args(config: Any, cls: type[MultiAgentConfig] = MAGRPOConfig) -> MultiAgentConfig:
    """The ``cls`` settings of a verl_lite config (``multi_agent`` plus the usual rollout/data keys)."""
    ma, arr = config.multi_agent, config.actor_rollout_ref
    own = (
        {"joint_mode": ma.joint_mode, "advantage_mode": config.algorithm.return_baseline}
        if issubclass(cls, MAGRPOConfig)
        else {}
    )
    return cls(
        **own,
        num_agents=ma.num_agents,
        num_turns=ma.num_turns,
        early_termination_threshold=ma.early_termination_threshold,
        discount=ma.discount,
        num_train_epochs=config.trainer.total_epochs,
        num_generations=arr.rollout.n,
        max_new_tokens=config.data.max_response_length,
        temperature=arr.rollout.temperature,
        top_p=arr.rollout.top_p,
        top_k=arr.rollout.top_k if arr.rollout.top_k > 0 else None,
        agent_learning_rate=arr.actor.optim.lr,
        advantage_normalization=config.algorithm.norm_adv_by_std_in_grpo,
        reference_kl_enabled=config.algorithm.use_kl_in_reward,
        reference_kl_coef=config.algorithm.kl_ctrl.kl_coef,
        rollout_buffer_size=config.data.train_batch_size,
        eval_interval=ma.eval_interval,
        eval_num_samples=ma.eval_num_samples,
        eval_batch_size=ma.eval_batch_size,
        logging_steps=ma.logging_steps,
        shared_policy=not ma.agents,
        output_dir=config.trainer.run_path,
    )


def agent_config(config: Any, entry: AgentEntry, critic: bool) -> Any:
    """The run's config for an agent with a policy of its own: its model (actor, rollout, tokenizer and,
    with ``critic``, critic), or without ``critic`` no critic."""
    arr = config.actor_rollout_ref
    path = entry.model or arr.model.path
    tokenizer = arr.model.tokenizer_path if entry.model is None else None
    out = replace(
        config, actor_rollout_ref=replace(arr, model=replace(arr.model, path=path, tokenizer_path=tokenizer))
    )
    if not critic:
        return replace(out, critic=replace(out.critic, enable=False))
    if entry.model is None:
        return out
    return replace(out, critic=replace(out.critic, model=replace(out.critic.model, path=path)))


@register_trainer("magrpo")
class MAGRPOModeTrainer(PPOTrainer):
    """``fit`` runs MAGRPO over the task rows instead of the PPO step (the hooks keep their meaning)."""

    # the settings class of the mode, and whether the first policy's critic values every agent's answers
    args_cls: type[MultiAgentConfig] = MAGRPOConfig
    centralised_critic = False

    @staticmethod
    def config_problems(config: Any) -> list[str]:
        """What ``validate_config`` reports before Ray starts: the function files this mode needs."""
        ma = config.multi_agent
        out = []
        if not ma.reward_function.path:
            out.append(
                f"trainer.mode={config.trainer.mode!r} needs multi_agent.reward_function.path (got null): the "
                "python file defining the joint reward function named by multi_agent.reward_function.name."
            )
        run_model = config.actor_rollout_ref.model.path
        if ma.agents and ma.agents[0].model not in (None, run_model):
            out.append(
                f"multi_agent.agents[0].model={ma.agents[0].model!r} differs from actor_rollout_ref.model.path="
                f"{run_model!r}; agent 0 runs on the run's policy: give it that path, null, or move its model "
                "to actor_rollout_ref.model.path."
            )
        refs = [(f"multi_agent.formatters[{i}].path", f) for i, f in enumerate(ma.formatters)]
        refs += [("multi_agent.reward_function.path", ma.reward_function)]
        refs += [("multi_agent.external_transition.path", ma.external_transition)]
        for key, ref in refs:
            if ref.path and not Path(ref.path).expanduser().is_file():
                out.append(f"{key}={ref.path!r} is not a file; give the python file defining {ref.name}.")
            elif ref.path:  # the file runs now, so a missing function or a broken file fails before Ray
                name_key = f"{key.removesuffix('.path')}.name={ref.name!r}"
                try:
                    function_from_file(ref.path, ref.name, name_key)
                except ValueError as err:  # no such function (the message lists the ones there)
                    out.append(str(err))
                except Exception as err:  # a user file can raise anything while it runs
                    out.append(
                        f"{key}={ref.path!r} fails while it is imported ({type(err).__name__}: {err})."
                    )
        return out

    def fit(self) -> list[dict[str, float]]:
        """MAGRPO over the task rows, ``data.train_batch_size`` tasks per update (CoMLRL's
        ``rollout_buffer_size``), evaluating and checkpointing on schedule; a checkpoint
        (``trainer.resume_mode``) is resumed first."""
        cfg = self.config
        self.args = args = magrpo_args(cfg, self.args_cls)
        with Runtime() as runtime:  # the other agents' policies, ended with the run
            self.ma_loop = self._multi_agent_loop(args, runtime)
            return self._train()

    def _train(self) -> list[dict[str, float]]:
        """``fit`` once every policy runs."""
        cfg, args = self.config, self.args
        self.ma_logger = MetricsLogger(args, None, tracker=self.tracker)
        self.env_step = 0
        dataset = self.train_batches.dataset
        self.task_rows = [dataset[i]["row"] for i in range(len(dataset))]
        val_rows = (
            [self.val_dataset[i]["row"] for i in range(len(self.val_dataset))] if self.val_dataset else []
        )
        self.val_rows = val_rows[: args.eval_num_samples] if args.eval_num_samples else val_rows
        # the rows in order, epoch after epoch; an epoch's last update takes the tasks left (as CoMLRL's
        # buffer, so every epoch ends with it empty); trainer.total_training_steps caps the updates
        self.tasks_per_update = cfg.data.train_batch_size
        self.updates_per_epoch = -(-len(self.task_rows) // self.tasks_per_update)
        every_epoch = args.num_train_epochs * self.updates_per_epoch
        self.total_steps = min(cfg.trainer.total_training_steps or every_epoch, every_epoch)
        if self.resume() is None:
            self._evaluate_due(1, range(1), [])
        for step in range(self.global_step + 1, self.total_steps + 1):
            self.on_step_end(step, self.train_step(step))
        self.on_train_end()
        return self.history

    def update_tasks(self, step: int) -> tuple[int, int, list[dict[str, Any]]]:
        """Update ``step``'s epoch, the position of its first task in that epoch, and its task rows."""
        epoch, update = divmod(step - 1, self.updates_per_epoch)
        index = update * self.tasks_per_update
        return epoch, index, self.task_rows[index : index + self.tasks_per_update]

    def train_step(self, step: int) -> dict[str, float]:
        """Update number ``step``: its tasks' joint trees sampled together, the evaluations due before its
        later tasks (the weights have not moved yet), one update; its metrics."""
        epoch, index, items = self.update_tasks(step)
        rollout = self.ma_loop.rollout(items, step)
        self._evaluate_due(step, range(1, len(items)), rollout.env_steps)
        metrics = self.ma_loop.update(rollout, step)
        self.global_step = step
        self.env_step += sum(rollout.env_steps)
        metrics.update(epoch=float(epoch), task=float(epoch * len(self.task_rows) + index + len(items)))
        return metrics

    def on_step_end(self, step: int, metrics: dict[str, float]) -> None:
        """Log (gated by ``logging_steps``), evaluate when due before the next update's first task,
        checkpoint on schedule (``trainer.save_freq`` updates, and after the last)."""
        if self.ma_logger.log_train(metrics, self.env_step):
            self.history.append({"step": self.env_step, **metrics})
        # logged at this step's env step, that evaluation belongs to this step's checkpoint: a resume keeps
        # the log lines up to the checkpoint's env step
        if step < self.total_steps:
            self._evaluate_due(step + 1, range(1), [])
        save_freq = self.config.trainer.save_freq
        if save_freq > 0 and (step % save_freq == 0 or step == self.total_steps):
            self.save_checkpoint(step)

    def _multi_agent_loop(self, args: MultiAgentConfig, runtime: Runtime) -> MultiAgentLoop:
        """The loop over the agents' policies (the run's, and with ``multi_agent.agents`` one per other agent,
        started in ``runtime``), every agent with its formatter, and the task's functions."""
        cfg, ma = self.config, self.config.multi_agent
        formatters = [load_function(f, f"multi_agent.formatters[{i}]") for i, f in enumerate(ma.formatters)]
        transition = ma.external_transition
        functions = TaskFunctions(
            reward_func=load_function(ma.reward_function, "multi_agent.reward_function"),
            reward_processor=None if ma.reward_scale == 1.0 else RewardProcessors.scale(ma.reward_scale),
            external_transition=load_function(transition, "multi_agent.external_transition")
            if transition.path
            else None,
        )
        formatters = agent_formatters(
            formatters[0] if len(formatters) == 1 else (formatters or None), args.num_agents
        )
        configs = [cfg] + [agent_config(cfg, e, not self.centralised_critic) for e in ma.agents[1:]]
        groups: list[WorkerGroups] = [self.groups]
        if len(configs) > 1:  # every other policy's processes start and load their models at once
            with ThreadPoolExecutor(len(configs) - 1, thread_name_prefix="start-policy") as starter:
                groups += list(starter.map(runtime.start_policy, configs[1:]))
        from transformers import AutoTokenizer

        tokenizers = [AutoTokenizer.from_pretrained(c.model.tokenizer_path or c.model.path) for c in configs]
        k = len(configs)
        agents = [
            Agent(groups[i % k], tokenizers[i % k], configs[i % k], formatters[i])
            for i in range(args.num_agents)
        ]
        critic = self.groups.critic if self.centralised_critic else None
        return MultiAgentLoop(args, agents, self.kv, functions, critic=critic)

    def policies(self) -> list[WorkerGroups]:
        """Every agent's policy, in agent order (a checkpoint holds each)."""
        return unique_groups([agent.groups for agent in self.ma_loop.agents])

    def sync_weights(self, version: int) -> None:
        """Every policy's rollout serves its weights as ``version``."""
        for groups in self.policies():
            groups.sync_weights(version)

    def _evaluate_due(self, step: int, tasks: range, env_steps: list[int]) -> None:
        """The evaluations due before the tasks ``tasks`` (positions) of update ``step``, each logged at the
        env step its task starts at (``env_steps``: the update's tasks' env steps, known after its
        rollout; none are needed for its first task)."""
        if not self.val_rows:
            return
        epoch, index, _ = self.update_tasks(step)
        tasks_done = epoch * len(self.task_rows) + index
        for j in tasks:
            if eval_due(tasks_done + j, index + j, self.args.eval_interval):
                env_step = self.env_step + sum(env_steps[:j])
                metrics, records = self.ma_loop.evaluate(self.val_rows, env_step)
                self.ma_logger.log_eval(metrics, env_step, records)
                self.history.append({"step": env_step, **metrics})

    # ---- checkpoints: PPO's save and resume, with the multi-agent progress added ------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "env_step": self.env_step,
            "loop": self.ma_loop.state_dict(),
            "logger": self.ma_logger.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.env_step = int(state["env_step"])
        self.ma_loop.load_state_dict(state["loop"])
        self.ma_logger.load_state_dict(state["logger"])

    def logged_step(self) -> int:
        """The loggers file this mode's lines under the env step."""
        return self.env_step


@register_trainer("iac")
class IACModeTrainer(MAGRPOModeTrainer):
    """CoMLRL's IAC from Hydra: every policy has its own critic (GAE on the joint return)."""

    args_cls = IACConfig

    @staticmethod
    def config_problems(config: Any) -> list[str]:
        """The ``magrpo`` mode's problems, and a critic (``algorithm.adv_estimator=gae``)."""
        out = MAGRPOModeTrainer.config_problems(config)
        if not (config.use_critic or config.actor_rollout_ref.actor.value_head.enable):
            out.append(
                f"trainer.mode={config.trainer.mode!r} trains a critic: set algorithm.adv_estimator=gae "
                f"(got {config.algorithm.adv_estimator!r})."
            )
        return out


@register_trainer("maac")
class MAACModeTrainer(IACModeTrainer):
    """CoMLRL's MAAC from Hydra: one centralised critic, the run's, values every agent's answers."""

    args_cls = MAACConfig
    centralised_critic = True

    @staticmethod
    def config_problems(config: Any) -> list[str]:
        """The ``iac`` mode's problems, and no value head on the actors (the one critic values every agent)."""
        out = IACModeTrainer.config_problems(config)
        if config.actor_rollout_ref.actor.value_head.enable:
            out.append(
                "trainer.mode='maac' values every agent's answers with one centralised critic, but "
                "actor_rollout_ref.actor.value_head.enable=true gives each agent its own; use trainer.mode=iac."
            )
        return out
