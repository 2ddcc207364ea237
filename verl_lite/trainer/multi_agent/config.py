"""``MAGRPOConfig``: the settings of a multi-agent GRPO run, named as in CoMLRL, validated on creation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class MAGRPOConfig:
    """Settings of :class:`~verl_lite.trainer.multi_agent.MAGRPOTrainer` (one field, one meaning).

    MAGRPO: every agent samples ``num_generations`` answers per task; answer j of every agent forms joint
    answer j, the reward function scores each joint answer once, and each agent's group-relative advantage
    is the joint reward minus the group mean over the std (GRPO, https://arxiv.org/abs/2402.03300).
    """

    # Number of agents; the reward function receives one completion list per agent, in agent order.
    num_agents: int = 2
    # Turns per task; turns after the first get their prompts from the external transition.
    num_turns: int = 1
    # Passes over the training tasks (the task order is kept; shuffle the dataset beforehand).
    num_train_epochs: int = 1
    # Joint samples per task and turn (each agent samples this many answers; the GRPO group size).
    num_generations: int = 4
    # Longest answer of one agent in one turn, in tokens.
    max_new_tokens: int = 32
    # Sampling temperature of training and evaluation generation.
    temperature: float = 1.0
    # Nucleus-sampling threshold of training and evaluation generation.
    top_p: float = 1.0
    # Adam learning rate of every agent's policy.
    learning_rate: float = 2.0e-5
    # Coefficient of the reference-KL loss (low-variance KL to the initial weights); 0 = no reference.
    kl_coef: float = 0.0
    # Evaluate before task 0 of each epoch and then every this many training tasks; 0 = only evaluate().
    eval_interval: int = 4
    # Most evaluation tasks per evaluation, from the start of the eval split (null = all of it).
    eval_num_samples: int | None = None
    # Evaluation tasks per generation call (the data-loader size; one answer per agent per turn each).
    eval_batch_size: int = 1
    # Least env_step gap between two training logs (env_step = joint rewards evaluated so far).
    logging_steps: int = 1
    # True: all agents are one model with one set of worker groups; False: each agent its own copy.
    shared_policy: bool = False
    # Where the run keeps its files (local metrics, evaluation JSON, W&B's offline folder by default).
    output_dir: str = "outputs/magrpo"
    # Seed of sampling and of the model initialisation order.
    seed: int = 1
    # Ray logical CPUs when the trainer starts a local Ray itself (more than cores: light actors share them);
    # ray_kwargs.ray_init.* in overrides reach ray.init as in main_ppo.
    ray_num_cpus: int = 8
    # Extra Hydra overrides of each agent's verl_lite config (``actor_rollout_ref...``), applied last.
    overrides: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        positive = {
            "num_agents": self.num_agents,
            "num_turns": self.num_turns,
            "num_train_epochs": self.num_train_epochs,
            "num_generations": self.num_generations,
            "max_new_tokens": self.max_new_tokens,
            "eval_batch_size": self.eval_batch_size,
            "logging_steps": self.logging_steps,
        }
        for key, value in positive.items():
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"MAGRPOConfig.{key} is {value!r}; it must be a positive integer.")
        if self.num_generations < 2:
            raise ValueError(
                f"MAGRPOConfig.num_generations is {self.num_generations}; group-relative advantages need at "
                "least 2 joint samples per task."
            )
        if not isinstance(self.eval_interval, int) or self.eval_interval < 0:
            raise ValueError(
                f"MAGRPOConfig.eval_interval is {self.eval_interval!r}; use 0 (manual evaluation only) or a "
                "positive number of training tasks."
            )
        if self.eval_num_samples is not None and self.eval_num_samples < 1:
            raise ValueError(
                f"MAGRPOConfig.eval_num_samples is {self.eval_num_samples!r}; use a positive task count or None "
                "(the whole eval split)."
            )
        if self.kl_coef < 0:
            raise ValueError(f"MAGRPOConfig.kl_coef is {self.kl_coef}; it must be >= 0 (0 turns the KL off).")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"MAGRPOConfig.top_p is {self.top_p}; it must lie in (0, 1].")


@dataclass
class IACConfig(MAGRPOConfig):
    """Settings of :class:`~verl_lite.trainer.multi_agent.IACTrainer` (the MAGRPO fields; critics use the
    critic defaults of ``configs/ppo_trainer.yaml``, changeable through ``overrides``)."""


@dataclass
class MAACConfig(MAGRPOConfig):
    """Settings of :class:`~verl_lite.trainer.multi_agent.MAACTrainer` (as :class:`IACConfig`)."""


@dataclass
class FunctionRef:
    """A Python function named by file and name (like ``reward.custom_reward_function``)."""

    # Python file defining the function (null = not set).
    path: str | None = None
    # Function name in that file.
    name: str = "reward_func"


@dataclass
class MultiAgentSection:
    """The ``multi_agent`` yaml group: what ``trainer.mode=magrpo`` adds to a verl_lite run.

    The other MAGRPO settings come from the usual keys: ``actor_rollout_ref.rollout.n`` is
    ``num_generations``, ``data.max_response_length`` is ``max_new_tokens``, ``trainer.total_epochs`` is
    ``num_train_epochs``, ``data.train_files`` / ``val_files`` are the task sets (each row a task dict).
    Every agent is the run's one policy; agents with models of their own run through the Python API
    (``MAGRPOTrainer``).
    """

    # Number of agents (the reward function receives one completion list per agent).
    num_agents: int = 2
    # Turns per task; turns after the first get their prompts from the external transition.
    num_turns: int = 1
    # Formatter files/functions in agent order, or one shared by all ([] = the rows' prompt field).
    formatters: list[Any] = field(default_factory=list)
    # The joint reward function: (agent0_completions, agent1_completions, ..., *, batch_items) -> rewards.
    reward_function: FunctionRef = field(default_factory=FunctionRef)
    # Every joint reward is multiplied by this before training (reward_processor = scale).
    reward_scale: float = 1.0
    # (batch_items=, prompts=, completions=, turn=) -> one external prompt per agent (null = own answer).
    external_transition: FunctionRef = field(default_factory=lambda: FunctionRef(name="external_transition"))
    # Evaluate before task 0 of each epoch and every this many training tasks; 0 = never during training.
    eval_interval: int = 0
    # Most evaluation tasks per evaluation from the start of data.val_files (null = all).
    eval_num_samples: int | None = None
    # Evaluation tasks per generation call.
    eval_batch_size: int = 1
    # Least env_step gap between two training logs.
    logging_steps: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.reward_function, dict):
            self.reward_function = FunctionRef(**self.reward_function)
        if isinstance(self.external_transition, dict):
            self.external_transition = FunctionRef(**self.external_transition)
        self.formatters = [FunctionRef(**f) if isinstance(f, dict) else f for f in self.formatters]
        if self.formatters and len(self.formatters) not in (1, self.num_agents):
            raise ValueError(
                f"multi_agent.formatters lists {len(self.formatters)} formatters for num_agents={self.num_agents}; "
                f"give none, one shared, or {self.num_agents}."
            )
