"""The ``magrpo`` trainer mode: MAGRPO driven from Hydra (``python -m verl_lite.main_ppo trainer.mode=magrpo``).

The run's policy (built by the ``TaskRunner``) serves every agent; agents with models of their own run
through the Python API (``MAGRPOTrainer``). Tasks are the
original rows of ``data.train_files`` / ``val_files``; formatters, the reward function and the external
transition are functions named by file, like ``reward.custom_reward_function``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verl_lite.trainer.multi_agent.callbacks import RewardProcessors, agent_formatters, eval_due
from verl_lite.trainer.multi_agent.config import FunctionRef, MAGRPOConfig
from verl_lite.trainer.multi_agent.loop import Agent, MultiAgentLoop, TaskFunctions
from verl_lite.trainer.multi_agent.metrics_log import MetricsLogger
from verl_lite.trainer.ppo.trainer_base import PPOTrainer, register_trainer
from verl_lite.utils.extensions import function_from_file


def load_function(ref: FunctionRef, key: str) -> Any:
    """The function ``ref.name`` of the file ``ref.path`` (``key`` names the config key in errors)."""
    return function_from_file(ref.path, ref.name, key)


def magrpo_args(config: Any) -> MAGRPOConfig:
    """The MAGRPO settings of a verl_lite config (``multi_agent`` plus the usual rollout/data keys)."""
    ma, arr = config.multi_agent, config.actor_rollout_ref
    return MAGRPOConfig(
        num_agents=ma.num_agents,
        num_turns=ma.num_turns,
        num_train_epochs=config.trainer.total_epochs,
        num_generations=arr.rollout.n,
        max_new_tokens=config.data.max_response_length,
        temperature=arr.rollout.temperature,
        top_p=arr.rollout.top_p,
        top_k=arr.rollout.top_k if arr.rollout.top_k > 0 else None,
        agent_learning_rate=arr.actor.optim.lr,
        advantage_normalization=config.algorithm.norm_adv_by_std_in_grpo,
        advantage_mode=config.algorithm.return_baseline,
        reference_kl_enabled=config.algorithm.use_kl_in_reward,
        reference_kl_coef=config.algorithm.kl_ctrl.kl_coef,
        eval_interval=ma.eval_interval,
        eval_num_samples=ma.eval_num_samples,
        eval_batch_size=ma.eval_batch_size,
        logging_steps=ma.logging_steps,
        shared_policy=True,
        output_dir=config.trainer.run_path,
    )


@register_trainer("magrpo")
class MAGRPOModeTrainer(PPOTrainer):
    """``fit`` runs MAGRPO over the task rows instead of the PPO step (the hooks keep their meaning)."""

    @staticmethod
    def config_problems(config: Any) -> list[str]:
        """What ``validate_config`` reports before Ray starts: the function files this mode needs."""
        ma = config.multi_agent
        out = []
        if not ma.reward_function.path:
            out.append(
                "trainer.mode='magrpo' needs multi_agent.reward_function.path (got null): the python file "
                "defining the joint reward function named by multi_agent.reward_function.name."
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
        cfg, ma = self.config, self.config.multi_agent
        self.args = args = magrpo_args(cfg)
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
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(cfg.model.tokenizer_path or cfg.model.path)
        agents = [Agent(self.groups, tokenizer, cfg, formatters[i]) for i in range(args.num_agents)]
        loop = MultiAgentLoop(args, agents, self.kv, functions)
        logger = MetricsLogger(args, None, tracker=self.tracker)
        train_rows = [self.train_batches.dataset[i]["row"] for i in range(len(self.train_batches.dataset))]
        val_rows = (
            [self.val_dataset[i]["row"] for i in range(len(self.val_dataset))] if self.val_dataset else []
        )
        val_rows = val_rows[: args.eval_num_samples] if args.eval_num_samples else val_rows
        # trainer.total_training_steps caps the run in training tasks (one task per step)
        limit = cfg.trainer.total_training_steps or args.num_train_epochs * len(train_rows)
        env_step = tasks_done = 0
        for epoch in range(args.num_train_epochs):
            for index, item in enumerate(train_rows):
                if tasks_done >= limit:
                    break
                if val_rows and eval_due(tasks_done, index, args.eval_interval):
                    metrics, records = loop.evaluate(val_rows, env_step)
                    logger.log_eval(metrics, env_step, records)
                    self.history.append({"step": env_step, **metrics})
                metrics = loop.train_task(item, tasks_done + 1)
                env_step += args.num_generations * args.num_turns
                tasks_done += 1
                metrics.update(epoch=float(epoch), task=float(tasks_done))
                if logger.log_train(metrics, env_step):
                    self.history.append({"step": env_step, **metrics})
        self.on_train_end()
        return self.history
