"""The typed PPO/GRPO configuration: one dataclass per yaml group, validated before Ray starts.

Defaults: ``configs/ppo_trainer.yaml`` is their source (every run composes it); each field here
repeats its yaml value, so that code building a config without Hydra gets the same run, and
``tests/test_docs_config.py`` fails when one value differs. The cross-field rules (batch
divisibility, registry names, files, lengths) live in ``verl_lite/trainer/validation.py`` and run on
the built :class:`PPOConfig`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from verl_lite.algorithms.rollout_correction import RolloutCorrectionConfig
from verl_lite.data.reasoning_gym import ReasoningGymConfig
from verl_lite.kv.config import KVStoreConfig
from verl_lite.reward.config import RewardConfig
from verl_lite.trainer.multi_agent.config import MultiAgentSection
from verl_lite.workers.config import ActorRolloutRefConfig, CriticWorkerConfig, ModelConfig


@dataclass
class DataConfig:
    """Prompt datasets and batch geometry."""

    # Parquet / jsonl files (or saved HF dataset folders) of training prompts; null = the embedded task.
    train_files: Any = None
    # Validation prompts (same format); null = the embedded task's validation split.
    val_files: Any = None
    # Column holding the prompt (chat messages or a string).
    prompt_key: str = "prompt"
    # data_source used for rows without that column.
    default_data_source: str = "synthetic_arith"
    # Agent loop of every row, replacing the files' agent_name column (null = the column, and
    # actor_rollout_ref.rollout.agent.default_agent_loop for rows without one).
    agent_name: str | None = None
    # Prompts per training step (each gets rollout.n samples).
    train_batch_size: int = 16
    # Prompts per validation generate call (null = the whole validation set at once).
    val_batch_size: int | None = None
    # Longest prompt in tokens after the chat template.
    max_prompt_length: int = 64
    # Longest response in tokens.
    max_response_length: int = 32
    # Drop prompts longer than max_prompt_length (counted and reported) instead of truncating.
    filter_overlong_prompts: bool = True
    # What to do with a prompt that is too long when not filtered: error, left or right.
    truncation: str = "error"
    # Shuffle training prompts every epoch.
    shuffle: bool = True
    # Seed of the prompt order.
    seed: int = 1
    # reasoning-gym generators as the training and validation rows (verl_lite/data/reasoning_gym.py).
    reasoning_gym: ReasoningGymConfig = field(default_factory=ReasoningGymConfig)


@dataclass
class KLControlConfig:
    """KL penalty coefficient in the reward (``algorithm.use_kl_in_reward``)."""

    # "fixed" or "adaptive".
    type: str = "fixed"
    kl_coef: float = 0.001
    # Adaptive controller: target KL and horizon (in samples).
    target_kl: float = 0.1
    horizon: int = 10000


@dataclass
class FilterGroupsConfig:
    """DAPO dynamic sampling: drop groups whose metric has zero variance."""

    enable: bool = False
    # Tag metric compared inside a group ("acc" or "score").
    metric: str = "acc"
    # At most this many extra generation rounds per step refill evicted groups, then the step fails
    # (<= 0: no limit but trainer.sample_timeout_s).
    max_num_gen_batches: int = 4


@dataclass
class AlgorithmConfig:
    """Advantage estimation and reward shaping."""

    # Registered advantage estimator: gae, grpo, rloo, reinforce_plus_plus, remax, opo, grpo_passk, gpg ...
    adv_estimator: str = "grpo"
    # Discount and GAE lambda.
    gamma: float = 1.0
    lam: float = 1.0
    # GRPO: divide by the group std (false gives Dr.GRPO).
    norm_adv_by_std_in_grpo: bool = True
    # joint_return: the group baseline of each return, mean | max | rloo | raw (CoMLRL's advantage_mode).
    return_baseline: str = "mean"
    # grpo, grpo_passk, gpg: added to the group std before dividing by it (in score units).
    epsilon: float = 1e-6
    # Subtract kl_ctrl.kl_coef * KL(actor || ref) from token rewards (PPO style).
    use_kl_in_reward: bool = False
    # KL estimator for the reward penalty.
    kl_penalty: str = "kl"
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)
    # Off-policy correction against the rollout's log-probs (importance weights, rejection), verl's keys.
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)


@dataclass
class ReplayBufferSection:
    """Staleness control of the replay buffer (``trainer.replay_buffer``); matters once rollouts run ahead."""

    # Largest allowed age of a sampled group in steps (global_step - the step it was submitted at);
    # null disables staleness control.
    max_off_policy_threshold: int | None = None
    # drop: evict groups older than the threshold and refill; wait: hold sampling while an in-flight group is.
    off_policy_strategy: str = "drop"
    # One step asks for at most this many x data.train_batch_size replacement groups, whatever evicted
    # them (scoring failures, staleness, DAPO filtering); then it fails naming the evictions (<= 0: no limit).
    max_refill_batches: int = 8


@dataclass
class TrainerConfig:
    """Run length, placement, logging, validation and checkpoints."""

    # Registered trainer mode: "sync" (generate, then train on exactly that), "one_step_off" (the next
    # step's batch generates while this one trains) or "fully_async" (the rollout streams groups into the
    # replay buffer without pause); the last two need rollout.mode=standalone.
    mode: str = "sync"
    # fully_async: sync the weights to the rollout every this many updates (and before validation).
    parameter_sync_step: int = 1
    project_name: str = "verl_lite"
    experiment_name: str = "grpo_tiny"
    # Loggers: any registered name (console, jsonl, wandb, tensorboard, mlflow, or one from trainer.extensions).
    logger: list[str] = field(default_factory=lambda: ["console", "jsonl"])
    # Passes over the training prompts.
    total_epochs: int = 1
    # Stop after this many steps (null = total_epochs worth).
    total_training_steps: int | None = 40
    nnodes: int = 1
    # Worker processes per node (GPUs per node on a GPU cluster).
    n_gpus_per_node: int = 1
    # Validate every test_freq steps (<= 0 disables periodic validation).
    test_freq: int = 10
    val_before_train: bool = True
    val_only: bool = False
    # Steps during which only the critic is trained.
    critic_warmup: int = 0
    # Reorder rows so every DP rank gets a similar token count.
    balance_batch: bool = True
    # Save every save_freq steps and after the last step (<= 0 disables) under default_local_dir.
    save_freq: int = -1
    # Checkpoint folder (null = run_dir/experiment_name/checkpoints); shared storage on a multi-node cluster.
    default_local_dir: str | None = None
    # Keep only the newest max_ckpt_to_keep checkpoints (null keeps all).
    max_ckpt_to_keep: int | None = None
    # auto: continue from the newest complete checkpoint in default_local_dir; disable: start fresh;
    # resume_path: continue from resume_from_path.
    resume_mode: str = "auto"
    resume_from_path: str | None = None
    # Dump rollout samples / validation generations as JSONL per step into these folders (null = off).
    rollout_data_dir: str | None = None
    validation_data_dir: str | None = None
    # Folder of this run's logs, metrics and plots.
    run_dir: str = "outputs/runs"
    # Seconds the replay buffer waits for finished groups before failing.
    sample_timeout_s: float = 600.0
    # Python files or modules imported in every process first (they register custom losses, estimators ...).
    extensions: list[str] = field(default_factory=list)
    replay_buffer: ReplayBufferSection = field(default_factory=ReplayBufferSection)

    @property
    def run_path(self) -> str:
        """This run's folder for logs, metrics and plots: ``run_dir/experiment_name``."""
        return os.path.join(self.run_dir, self.experiment_name)

    @property
    def checkpoint_dir(self) -> str:
        """Where checkpoints go: ``default_local_dir``, or ``checkpoints`` inside the run folder."""
        return self.default_local_dir or os.path.join(self.run_path, "checkpoints")


@dataclass
class RayConfig:
    """How to reach Ray."""

    # Arguments of ray.init (address: null starts a local instance; "auto" joins a cluster).
    ray_init: dict = field(default_factory=lambda: {"address": None, "num_cpus": None})


@dataclass
class CriticSection(CriticWorkerConfig):
    """The ``critic`` yaml group: the value worker plus whether it is used at all."""

    # null = use a critic exactly when the estimator needs values (gae).
    enable: bool | None = None


@dataclass
class PPOConfig:
    """The whole run (``configs/ppo_trainer.yaml``)."""

    data: DataConfig = field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    critic: CriticSection = field(default_factory=CriticSection)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    ray_kwargs: RayConfig = field(default_factory=RayConfig)
    kv: KVStoreConfig = field(default_factory=KVStoreConfig)
    multi_agent: MultiAgentSection = field(default_factory=MultiAgentSection)

    @property
    def model(self) -> ModelConfig:
        return self.actor_rollout_ref.model

    @property
    def use_critic(self) -> bool:
        """Whether critic workers start: ``critic.enable``, or by default when the estimator needs values and
        the actor has no value head of its own."""
        if self.critic.enable is not None:
            return self.critic.enable
        if self.actor_rollout_ref.actor.value_head.enable:
            return False
        from verl_lite.algorithms import ADV_ESTIMATORS, get_adv_estimator_needs

        # An unknown estimator has no critic here; validation reports the name itself.
        estimator = self.algorithm.adv_estimator
        return estimator in ADV_ESTIMATORS and get_adv_estimator_needs(estimator).values

    @property
    def use_reference(self) -> bool:
        return self.actor_rollout_ref.actor.use_kl_loss or self.algorithm.use_kl_in_reward

    @property
    def recompute_old_log_prob(self) -> bool:
        """Whether the separate old-log-prob forward runs (``actor.old_log_prob``).

        With ``auto`` it is skipped when the update is one on-policy pass (one epoch, one mini-batch
        holding the whole step, no KL in the reward): the update's detached log-probs are then exactly
        the old ones, so the ratio is 1 and the gradient is unchanged. Off-policy correction
        (``algorithm.rollout_correction``) always runs it: its weights and rejection mask are
        computed there, before the update counts the tokens it normalises by.
        """
        actor = self.actor_rollout_ref.actor
        single_pass = actor.ppo_epochs == 1 and actor.ppo_mini_batch_size >= self.data.train_batch_size
        return (
            actor.old_log_prob == "recompute"
            or not single_pass
            or self.algorithm.use_kl_in_reward
            or self.algorithm.rollout_correction.enabled
        )

    @property
    def dp_size(self) -> int:
        return self.trainer.nnodes * self.trainer.n_gpus_per_node
