"""The settings of the multi-agent trainers with CoMLRL 1.4's field names and defaults, validated on creation."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# CoMLRL's settings for placing models on devices; verl_lite places every worker through Ray instead
DEVICE_FIELDS = ("parallel_training", "agent_devices", "reference_devices", "critic_devices")
ADVANTAGE_MODES = ("mean", "max", "rloo", "raw")
JOINT_MODES = ("aligned", "cross")


@dataclass
class MultiAgentConfig:
    """The settings every multi-agent trainer shares, named and defaulted as in CoMLRL 1.4.

    Fields after ``reference_devices`` are verl_lite's own (policy sharing, output folder, Ray).
    """

    # How answers form joint answers: a plain class attribute here (IAC and MAAC pair answer j of every
    # agent, and CoMLRL's actor-critic configs have no such field); MAGRPOConfig makes it a field.
    joint_mode = "aligned"

    # Passes over the training tasks (the task order is kept; shuffle the dataset beforehand).
    num_train_epochs: int = 20
    # Adam learning rate of every agent's policy.
    agent_learning_rate: float = 5.0e-6
    # Least env_step gap between two training logs (env_step = joint rewards evaluated so far).
    logging_steps: int = 50
    # Number of agents; the reward function receives one completion list per agent, in agent order.
    num_agents: int = 2
    # CoMLRL's device placement ("none" | "mp"); accepted with a notice, Ray places the workers.
    parallel_training: str = "none"
    # CoMLRL's device per agent; accepted with a notice, Ray places the workers.
    agent_devices: str | Sequence[str] | None = None
    # Joint samples per task and turn (each agent samples this many answers).
    num_generations: int = 4
    # Longest answer of one agent in one turn, in tokens.
    max_new_tokens: int = 256
    # Sampling temperature of training and evaluation generation.
    temperature: float = 0.6
    # Nucleus-sampling threshold of training and evaluation generation.
    top_p: float = 0.6
    # Top-k sampling (None = off).
    top_k: int | None = 50
    # Turns per task; turns after the first get their prompts from the external transition.
    num_turns: int = 2
    # A joint answer's return = its reward + discount * the mean return of the joint answers it continues in
    # at the next turn (CoMLRL 1.4.3's MAGRPO accepts it but sums undiscounted: the same at 1.0).
    discount: float = 1.0
    # A node of the joint tree whose mean joint reward exceeds this has no children (None = never cut).
    early_termination_threshold: float | None = -0.2
    # Turns after the first: the external prompt replaces the formatter's text instead of following it.
    external_prompt_passthrough: bool = False
    # Evaluate before task 0 of each epoch and then every this many training tasks; 0 = only evaluate().
    eval_interval: int = 16
    # Most evaluation tasks per evaluation, from the start of the eval split (None = all of it).
    eval_num_samples: int | None = 4
    # Evaluation tasks per generation call (one answer per agent per turn each).
    eval_batch_size: int = 1
    # Tasks whose joint trees are generated together and trained in one update (an epoch's last update
    # takes the tasks left over). CoMLRL counts its trees' nodes: the same when num_turns=1.
    rollout_buffer_size: int = 2
    # Joint-tree nodes (one turn of one task's branch; with one turn, tasks) per optimiser step within an
    # update: ceil(rollout_buffer_size / train_batch_size) steps per one-turn update (None =
    # rollout_buffer_size).
    train_batch_size: int | None = None
    # Standardise each group's advantages (GRPO-style); for IAC/MAAC, GAE's whitening is always on.
    advantage_normalization: bool = True
    # Subtract reference_kl_coef * KL(policy || initial weights), summed over the answer, from its return.
    reference_kl_enabled: bool = False
    # Weight of that KL penalty.
    reference_kl_coef: float = 0.1
    # CoMLRL's device of the reference models; accepted with a notice, Ray places the workers.
    reference_devices: str | Sequence[str] | None = None
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

    # fewest joint samples per task: group baselines need two
    min_generations = 2

    def __post_init__(self) -> None:
        name = type(self).__name__
        if self.train_batch_size is None:
            self.train_batch_size = self.rollout_buffer_size
        positive = {
            "num_agents": self.num_agents,
            "num_turns": self.num_turns,
            "num_train_epochs": self.num_train_epochs,
            "num_generations": self.num_generations,
            "max_new_tokens": self.max_new_tokens,
            "eval_batch_size": self.eval_batch_size,
            "logging_steps": self.logging_steps,
            "rollout_buffer_size": self.rollout_buffer_size,
            "train_batch_size": self.train_batch_size,
        }
        for key, value in positive.items():
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}.{key} is {value!r}; it must be a positive integer.")
        if self.num_generations < self.min_generations:
            raise ValueError(
                f"{name}.num_generations is {self.num_generations}; group baselines need at least "
                f"{self.min_generations} joint samples per task."
            )
        if not isinstance(self.eval_interval, int) or self.eval_interval < 0:
            raise ValueError(
                f"{name}.eval_interval is {self.eval_interval!r}; use 0 (manual evaluation only) or a "
                "positive number of training tasks."
            )
        if self.eval_num_samples is not None and self.eval_num_samples < 1:
            raise ValueError(
                f"{name}.eval_num_samples is {self.eval_num_samples!r}; use a positive task count or None "
                "(the whole eval split)."
            )
        if self.reference_kl_coef < 0:
            raise ValueError(f"{name}.reference_kl_coef is {self.reference_kl_coef}; it must be >= 0.")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"{name}.top_p is {self.top_p}; it must lie in (0, 1].")
        if self.top_k is not None and (not isinstance(self.top_k, int) or self.top_k < 1):
            raise ValueError(f"{name}.top_k is {self.top_k!r}; use a positive integer or None (no top-k).")
        check_joint_tree(self.joint_mode, self.discount, name)
        if self.parallel_training not in ("none", "mp"):
            raise ValueError(f"{name}.parallel_training is {self.parallel_training!r}; use 'none' or 'mp'.")
        placed = [key for key in DEVICE_FIELDS if getattr(self, key, None) not in (None, "none")]
        if placed:
            warnings.warn(
                f"{name}: {', '.join(placed)} ignored; Ray places each agent's workers (one process per "
                "policy, see ray_num_cpus and overrides).",
                stacklevel=3,
            )


@dataclass
class MAGRPOConfig(MultiAgentConfig):
    """Settings of :class:`~verl_lite.trainer.multi_agent.MAGRPOTrainer`: CoMLRL's ``MAGRPOConfig``.

    Every agent samples ``num_generations`` answers per task; answer j of every agent forms joint answer
    j (``joint_mode="cross"``: every combination of one answer per agent is one), the reward function
    scores each joint answer once, and each agent's advantage is its answer's return against the group's
    baseline (``advantage_mode``), standardised when ``advantage_normalization`` (GRPO,
    https://arxiv.org/abs/2402.03300).
    """

    # aligned: joint answer j = every agent's answer j (num_generations joint answers per task); cross:
    # every combination of one answer per agent (num_generations ** num_agents), each answer's return
    # the sum of the rewards of the combinations it is in (as CoMLRL). One turn only for cross.
    joint_mode: str = "aligned"
    # Baseline of the joint return within a task's group: mean | max | rloo | raw (no baseline).
    advantage_mode: str = "mean"

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        if self.advantage_mode not in ADVANTAGE_MODES:
            raise ValueError(
                f"{name}.advantage_mode is {self.advantage_mode!r}; use one of {', '.join(ADVANTAGE_MODES)}."
            )


def check_joint_tree(joint_mode: str, discount: float, owner: str) -> None:
    """Raise for an unknown ``joint_mode`` or a ``discount`` outside [0, 1] (``owner``: the config named in
    the message)."""
    if joint_mode not in JOINT_MODES:
        raise ValueError(f"{owner}.joint_mode is {joint_mode!r}; use one of {', '.join(JOINT_MODES)}.")
    if not 0.0 <= discount <= 1.0:
        raise ValueError(f"{owner}.discount is {discount}; it must lie in [0, 1].")


@dataclass
class MAREINFORCEConfig(MAGRPOConfig):
    """Settings of ``MAREINFORCETrainer``: MAGRPO with the raw return as advantage (no baseline)."""

    advantage_mode: str = "raw"


@dataclass
class MAReMaxConfig(MAGRPOConfig):
    """Settings of ``MAReMaxTrainer``: MAGRPO with the group's best return as baseline."""

    advantage_mode: str = "max"


@dataclass
class MARLOOConfig(MAGRPOConfig):
    """Settings of ``MARLOOTrainer``: MAGRPO with the leave-one-out mean return as baseline."""

    advantage_mode: str = "rloo"


@dataclass
class ActorCriticConfig(MultiAgentConfig):
    """The fields IAC and MAAC add (CoMLRL's names and defaults): the critic is a separate value model, or
    with IAC's ``use_separate_critic=False`` a value head on each agent's actor."""

    num_train_epochs: int = 40
    logging_steps: int = 1
    num_generations: int = 1
    rollout_buffer_size: int = 8
    top_k: int | None = None
    # Adam learning rate of the critic(s) (None = agent_learning_rate).
    critic_learning_rate: float | None = 5.0e-6
    # Clip of a value head's update around the old values (use_separate_critic=False; None: unclipped). As
    # in CoMLRL, a separate critic's update is not clipped.
    value_clip_range: float | None = 0.2
    # Weight of the value loss in the loss shared with the actor (a value head on the actor); a separate
    # critic's Adam undoes any scale of its own loss, so there it has no effect (as in CoMLRL).
    value_loss_coef: float = 0.6
    # v: the critic values the prompt and answer so far (the only kind built here).
    critic_type: str = "v"
    # CoMLRL's device per critic; accepted with a notice, Ray places the workers.
    critic_devices: str | Sequence[str] | None = None

    min_generations = 1

    @property
    def shared_value_head(self) -> bool:
        """Whether each agent's values come from a head on its actor, trained in the actor's loss."""
        return False

    def __post_init__(self) -> None:
        if self.critic_learning_rate is None:
            self.critic_learning_rate = self.agent_learning_rate
        super().__post_init__()
        name = type(self).__name__
        if self.critic_type != "v":
            raise ValueError(
                f"{name}.critic_type is {self.critic_type!r}; verl_lite's critic values the prompt and the answer "
                "so far, V(prompt, answer), so only 'v' is valid."
            )
        if not self.shared_value_head and self.value_loss_coef != 0.6:
            warnings.warn(
                f"{name}.value_loss_coef={self.value_loss_coef!r} only rescales a separate critic's loss, which "
                "its Adam optimiser undoes (CoMLRL's too, up to eps); it has no effect here. It weighs the loss "
                "of a value head on the actor (IACConfig(use_separate_critic=False)).",
                stacklevel=3,
            )
        if self.value_clip_range is not None and self.value_clip_range <= 0:
            raise ValueError(f"{name}.value_clip_range is {self.value_clip_range}; it must be > 0.")


@dataclass
class IACConfig(ActorCriticConfig):
    """Settings of :class:`~verl_lite.trainer.multi_agent.IACTrainer`: CoMLRL's ``IACConfig``."""

    # True: each agent's critic is its own model; False: a value head on the agent's actor, trained with it
    # in one loss (policy loss + value_loss_coef x value loss, one optimiser at agent_learning_rate).
    use_separate_critic: bool = True
    # Width of a tanh layer in the actor's value head (use_separate_critic=False; None: one linear layer).
    value_head_hidden_dim: int | None = None
    # CoMLRL's hidden width of a separate critic's head; verl_lite's critic head is linear (only None).
    critic_value_head_hidden_dim: int | None = None

    @property
    def shared_value_head(self) -> bool:
        return not self.use_separate_critic

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.critic_value_head_hidden_dim is not None:
            raise ValueError(
                f"IACConfig.critic_value_head_hidden_dim is {self.critic_value_head_hidden_dim!r}; verl_lite's "
                "separate critic has a linear head, so only None is valid."
            )
        if self.value_head_hidden_dim is not None and not self.shared_value_head:
            warnings.warn(
                "IACConfig.value_head_hidden_dim sizes the head on the actor, which use_separate_critic=True "
                "does not build; it has no effect (as in CoMLRL).",
                stacklevel=3,
            )


@dataclass
class MAACConfig(ActorCriticConfig):
    """Settings of :class:`~verl_lite.trainer.multi_agent.MAACTrainer`: CoMLRL's ``MAACConfig``."""


@dataclass
class FunctionRef:
    """A Python function named by file and name (like ``reward.custom_reward_function``)."""

    # Python file defining the function (null = not set).
    path: str | None = None
    # Function name in that file.
    name: str = "reward_func"


@dataclass
class AgentEntry:
    """One entry of ``multi_agent.agents``: an agent with a policy of its own."""

    # Model folder of the agent's policy (null = actor_rollout_ref.model.path, a copy of its own).
    model: str | None = None


@dataclass
class MultiAgentSection:
    """The ``multi_agent`` yaml group: what ``trainer.mode=magrpo`` adds to a verl_lite run.

    The other MAGRPO settings come from the usual keys: ``actor_rollout_ref.rollout.n`` is
    ``num_generations``, ``data.max_response_length`` is ``max_new_tokens``, ``trainer.total_epochs`` is
    ``num_train_epochs``, ``data.train_files`` / ``val_files`` are the task sets (each row a task dict).
    Every agent is the run's one policy, or with ``agents`` each its own.
    """

    # Number of agents (the reward function receives one completion list per agent).
    num_agents: int = 2
    # Turns per task; turns after the first get their prompts from the external transition.
    num_turns: int = 1
    # aligned: joint answer j = every agent's answer j; cross: every combination of one answer per agent,
    # each answer trained on the sum of its combinations' returns (CoMLRL's joint_mode).
    joint_mode: str = "aligned"
    # Turns after the first: every joint answer continues in a node of its own (CoMLRL's joint tree),
    # unless its node's mean joint reward exceeds this (null = always continue).
    early_termination_threshold: float | None = None
    # A joint answer's return = its reward + discount * the mean return of its next turn's joint answers.
    discount: float = 1.0
    # One entry per agent, each a policy (worker groups) of its own: [{model: folder}, ...], agent 0 on the
    # run's (its model must be null or actor_rollout_ref.model.path); [] = every agent is the run's policy.
    agents: list[Any] = field(default_factory=list)
    # Formatter files/functions in agent order, or one shared by all ([] = the rows' prompt field).
    formatters: list[Any] = field(default_factory=list)
    # The joint reward function: (agent0_completions, agent1_completions, ..., *, batch_items) -> rewards.
    reward_function: FunctionRef = field(default_factory=FunctionRef)
    # Every joint reward is multiplied by this before training (reward_processor = scale).
    reward_scale: float = 1.0
    # CoMLRL's (prompt=, agent_completions=, num_agents=, prompt_history_per_agent=,
    # response_history_per_agent=) -> one external prompt per agent (null = each agent's own answer).
    external_transition: FunctionRef = field(default_factory=lambda: FunctionRef(name="external_transition"))
    # Evaluate before task 0 of each epoch and every this many training tasks; 0 = never during training.
    eval_interval: int = 0
    # Most evaluation tasks per evaluation from the start of data.val_files (null = all).
    eval_num_samples: int | None = None
    # Evaluation tasks per generation call.
    eval_batch_size: int = 1
    # Least env_step gap between two training logs.
    logging_steps: int = 1

    @property
    def policies(self) -> int:
        """Policies the run trains (each with its own worker groups and resource pools)."""
        return max(1, len(self.agents))

    def __post_init__(self) -> None:
        if isinstance(self.reward_function, dict):
            self.reward_function = FunctionRef(**self.reward_function)
        if isinstance(self.external_transition, dict):
            self.external_transition = FunctionRef(**self.external_transition)
        self.formatters = [FunctionRef(**f) if isinstance(f, dict) else f for f in self.formatters]
        self.agents = [AgentEntry(**a) if isinstance(a, dict) else a for a in self.agents]
        if self.agents and len(self.agents) != self.num_agents:
            raise ValueError(
                f"multi_agent.agents lists {len(self.agents)} agents for num_agents={self.num_agents}; give "
                f"{self.num_agents} entries (one policy each), or [] (every agent is the run's policy)."
            )
        check_joint_tree(self.joint_mode, self.discount, "multi_agent")
        if self.formatters and len(self.formatters) not in (1, self.num_agents):
            raise ValueError(
                f"multi_agent.formatters lists {len(self.formatters)} formatters for num_agents={self.num_agents}; "
                f"give none, one shared, or {self.num_agents}."
            )
