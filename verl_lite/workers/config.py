"""Typed configuration of the worker floor: model, optimizer, engine, actor, critic and rollout.

Each dataclass mirrors a yaml group (``actor_rollout_ref.model``, ``...actor.optim`` ...). Build
them from yaml/DictConfig/dict with ``verl_lite.utils.config.from_config``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl_lite.algorithms.config import PolicyLossConfig


@dataclass
class ModelConfig:
    """Where the model comes from and how it is built."""

    # Hugging Face folder (or hub id where the hub is reachable) of the model and its tokenizer; null = the
    # embedded tiny model (filled in by the entry points).
    path: str | None = None
    # Tokenizer folder when it differs from ``path``.
    tokenizer_path: str | None = None
    # Recompute activations in backward to save memory (slower).
    enable_gradient_checkpointing: bool = False
    # Pass trust_remote_code to transformers.
    trust_remote_code: bool = False


@dataclass
class RLModelConfig(ModelConfig):
    """A trained policy or value model (PPO's actor and critic, SFT): ``ModelConfig`` plus LoRA and packing.

    Reward-model training uses the plain ``ModelConfig``: full fine-tuning, padded batches.
    """

    # LoRA adapter rank (0 = train every weight). With a rank, PEFT adapters train on target_modules
    # and only they are optimised, synced to the rollout and checkpointed.
    lora_rank: int = 0
    # LoRA scale numerator: the adapter's update is (lora_alpha / lora_rank) * B @ A.
    lora_alpha: float = 16
    # Modules that get adapters: "all-linear" (every linear layer but the output head) or a list of
    # module names (e.g. [q_proj, v_proj]).
    target_modules: str | list[str] = "all-linear"
    # Dropout on the adapters' input during training (0 = none).
    lora_dropout: float = 0.0
    # Pack each micro-batch's rows into one sequence without padding for the forward (attention kept
    # within rows: varlen flash attention on GPU with flash-attn, row-by-row SDPA elsewhere).
    use_remove_padding: bool = False


@dataclass
class OptimConfig:
    """AdamW and its learning-rate schedule."""

    # Peak learning rate.
    lr: float = 2e-5
    # AdamW decoupled weight decay.
    weight_decay: float = 0.0
    # AdamW betas.
    betas: tuple[float, float] = (0.9, 0.999)
    # Clip the global gradient norm to this value (the norm before clipping is logged).
    grad_clip: float = 1.0
    # "constant" or "cosine" (linear warmup, then cosine decay to min_lr_ratio * lr).
    lr_scheduler: str = "constant"
    # Warmup length in schedule steps; when negative, warmup_steps_ratio * total_training_steps is used.
    warmup_steps: int = -1
    # Fraction of total_training_steps spent warming up (when warmup_steps < 0).
    warmup_steps_ratio: float = 0.0
    # Floor of the cosine schedule as a fraction of lr.
    min_lr_ratio: float = 0.0
    # Steps the schedule spans; it advances once per lr_scheduler_step call (PPO: once per training
    # step; SFT: once per optimizer step). Set by the trainer; needed by the cosine schedule.
    total_training_steps: int = 1


@dataclass
class EngineConfig:
    """Which training engine runs the model and how it is sharded."""

    # Registered engine name (see verl_lite.workers.engine.ENGINES).
    name: str = "fsdp"
    # Parameter dtype on GPU under mixed precision ("bfloat16" or "float32"); CPU always trains in fp32.
    param_dtype: str = "bfloat16"
    # Process-group backend: "auto" (nccl on GPU, gloo on CPU), "gloo" or "nccl" (on GPU CPU tensors use gloo).
    backend: str = "auto"
    # Random seed of model-side randomness (dropout, sampling in the same process).
    seed: int = 1


@dataclass
class FSDPConfig:
    """Where FSDP2 keeps a frozen model's state (verl's ``ref.fsdp_config``)."""

    # Keep the sharded parameters in CPU memory (FSDP2 CPUOffloadPolicy); each layer is copied to the
    # device for its forward. Saves device memory, costs a host-device copy per layer and use.
    param_offload: bool = False


@dataclass
class ActorFSDPConfig(FSDPConfig):
    """Where FSDP2 keeps a trained model's state (verl's ``actor.fsdp_config``).

    FSDP2's CPUOffloadPolicy moves parameters, gradients and optimizer state together, so
    ``param_offload`` implies ``optimizer_offload``; ``optimizer_offload`` alone keeps the parameters
    on the device and parks only the AdamW state in CPU memory between optimizer steps.
    """

    # Keep AdamW state in CPU memory between steps (copied to the device for each step).
    optimizer_offload: bool = False


@dataclass
class UpdateBatchingConfig:
    """How a PPO-style update cuts a step's rows: epochs, mini-batches, micro-batches (actor and critic)."""

    # Prompts per optimizer step over all data-parallel ranks (each brings rollout.n trajectories).
    ppo_mini_batch_size: int = 16
    # Trajectories per forward/backward on one rank (ignored with use_dynamic_bsz).
    ppo_micro_batch_size_per_gpu: int = 32
    # Cut micro-batches by a token budget instead of a row count.
    use_dynamic_bsz: bool = False
    # Token budget of one micro-batch per rank (prompt + response tokens) with use_dynamic_bsz.
    ppo_max_token_len_per_gpu: int = 16384
    # Passes over the step's data.
    ppo_epochs: int = 1
    # Shuffle rows before cutting mini-batches (seeded by the global step).
    shuffle: bool = True


@dataclass
class ValueHeadConfig:
    """A value head on the actor's body, trained in the actor's loss: the critic shares the policy's
    weights (CoMLRL's ``use_separate_critic=False``), and the run starts no critic workers."""

    # Put the head on the actor (needs an estimator that reads values, e.g. gae).
    enable: bool = False
    # Width of a tanh layer between the body's last hidden state and the scalar (None: one linear layer).
    hidden_dim: int | None = None
    # Weight of the clipped value loss added to the policy loss.
    loss_coef: float = 0.5
    # Value clipping range around the rollout-time values (None: no clipping).
    cliprange_value: float | None = 0.5


@dataclass
class ActorConfig(UpdateBatchingConfig):
    """PPO policy update: batch geometry (inherited), loss and regularisers."""

    # auto: skip the old-log-prob forward when the update is one on-policy pass; recompute: always run it.
    old_log_prob: str = "auto"
    # Registered policy loss name (verl_lite.algorithms.POLICY_LOSSES).
    policy_loss: str = "vanilla"
    # Loss aggregation mode (see docs/algorithms.md).
    loss_agg_mode: str = "token-mean"
    # Constant T of seq-mean-token-sum-norm (Dr. GRPO), in tokens: every sequence's token sum is divided
    # by it, whatever the micro-batch's padded width; None = rollout.response_length.
    loss_scale_factor: float | None = None
    # Policy-loss parameters, by PolicyLossConfig's field names (it holds their defaults and meaning;
    # each loss reads the ones its name prefixes; validated in trainer/validation.py).
    clip_ratio_low: float = PolicyLossConfig.clip_ratio_low
    clip_ratio_high: float = PolicyLossConfig.clip_ratio_high
    clip_ratio_c: float = PolicyLossConfig.clip_ratio_c
    log_ratio_clamp: float = PolicyLossConfig.log_ratio_clamp
    sapo_tau_pos: float = PolicyLossConfig.sapo_tau_pos
    sapo_tau_neg: float = PolicyLossConfig.sapo_tau_neg
    cispo_clip_ratio_low: float = PolicyLossConfig.cispo_clip_ratio_low
    cispo_clip_ratio_high: float = PolicyLossConfig.cispo_clip_ratio_high
    clip_cov_ratio: float = PolicyLossConfig.clip_cov_ratio
    clip_cov_lb: float = PolicyLossConfig.clip_cov_lb
    clip_cov_ub: float = PolicyLossConfig.clip_cov_ub
    kl_cov_ratio: float = PolicyLossConfig.kl_cov_ratio
    kl_cov_coef: float = PolicyLossConfig.kl_cov_coef
    # Entropy bonus coefficient (0 disables it).
    entropy_coeff: float = 0.0
    # Add a KL(actor || ref) loss term (GRPO style) instead of a reward penalty.
    use_kl_loss: bool = False
    # Coefficient of the KL loss.
    kl_loss_coef: float = 0.001
    # KL estimator of the KL loss (k1, k2, k3/low_var_kl, abs, and "+" variants).
    kl_loss_type: str = "low_var_kl"
    value_head: ValueHeadConfig = field(default_factory=ValueHeadConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    fsdp_config: ActorFSDPConfig = field(default_factory=ActorFSDPConfig)


@dataclass
class RefConfig:
    """The frozen reference policy (``actor_rollout_ref.ref``): how its log-probs are computed."""

    # Trajectories per forward when computing reference log-probs on one rank.
    log_prob_micro_batch_size_per_gpu: int = 64
    # Cut the reference forwards by a token budget instead of a row count.
    log_prob_use_dynamic_bsz: bool = False
    # Token budget (prompt + response) of one reference forward per rank with log_prob_use_dynamic_bsz.
    log_prob_max_token_len_per_gpu: int = 16384
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)


@dataclass
class CriticConfig(UpdateBatchingConfig):
    """Value model update: batch geometry (inherited) and the clipped value loss."""

    # Value clipping range around the old values (None: no clipping).
    cliprange_value: float | None = 0.5
    loss_agg_mode: str = "token-mean"
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-4))


@dataclass
class SamplingConfig:
    """Sampling parameters of one generation call."""

    # Samples per prompt.
    n: int = 1
    temperature: float = 1.0
    # Nucleus sampling threshold (1.0 disables it).
    top_p: float = 1.0
    # Top-k sampling (-1 or 0 disables it).
    top_k: int = -1
    # False means greedy decoding.
    do_sample: bool = True


@dataclass
class MultiTurnConfig:
    """Limits and tools of multi-turn (tool-calling) agent loops (``actor_rollout_ref.rollout.multi_turn``)."""

    # Most model generations in one trajectory (None = only the response budget limits them).
    max_assistant_turns: int | None = None
    # Most tool-result (user) turns in one trajectory (None = only the response budget limits them).
    max_user_turns: int | None = None
    # Tool calls of one assistant turn run concurrently; calls beyond this many are dropped (and counted).
    max_parallel_calls: int = 1
    # Longest tool result, in characters, shown to the model; longer results are cut on the side below.
    max_tool_response_length: int = 256
    # Which part of a long tool result is kept, as in verl: left (its start), middle (start and end),
    # right (its end); a marker shows where text was cut.
    tool_response_truncate_side: str = "middle"
    # Yaml list of tools (verl's format: tools: [{class_name, config, tool_schema}]); None = no tools.
    tool_config_path: str | None = None
    # Yaml list of interactions (verl's format: interaction: [{name, class_name, config}]); a row picks one
    # by extra_info.interaction_kwargs.name and it answers the model's turns that call no tool; None = none.
    interaction_config_path: str | None = None
    # Registered tool-call parser of the model's text ("hermes": <tool_call>{json}</tool_call>).
    format: str = "hermes"
    # Seconds one tool call may run before it is abandoned and the model sees an error result.
    tool_timeout_s: float = 30.0


@dataclass
class AgentFunction:
    """An async agent function named by file and name (``rollout.agent.openai.function``)."""

    # Python file defining the agent (null = none; required by the openai_agent loop).
    path: str | None = None
    # Name of the ``async def agent(client, row) -> float | None`` in that file.
    name: str = "agent"


@dataclass
class OpenAIAgentConfig:
    """The ``openai_agent`` loop: a user's agent written against the OpenAI client (``rollout.agent.openai``)."""

    function: AgentFunction = field(default_factory=AgentFunction)
    # Seconds one trajectory's agent may run; past it the trajectory is a counted failure (agent_timeouts).
    timeout_s: float = 600.0


@dataclass
class EnvClassRef:
    """An OpenEnv environment class named by file and name, or by a dotted path (``rollout.agent.openenv.env``)."""

    # Python file defining the class (null = ``name`` is a dotted import path).
    path: str | None = None
    # The class: its name in that file, or a dotted path (my_env.server.MyEnvironment) when path is null.
    name: str | None = None


@dataclass
class OpenEnvConfig:
    """The ``openenv`` loop: one episode of an OpenEnv environment per trajectory (``rollout.agent.openenv``)."""

    # An Environment subclass (run in the agent loop's process) or an EnvClient subclass (a server's client).
    env: EnvClassRef = field(default_factory=EnvClassRef)
    # Keyword arguments of its constructor, one instance per trajectory (a client's base_url, ...).
    env_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class AgentConfig:
    """The agent-loop workers that drive the rollout servers (``rollout.agent``)."""

    # Agent-loop worker actors sharing each batch (each runs many loops at once); None = none in the hybrid
    # placement (each rollout server's process runs the loops of its share itself) and 1 in standalone.
    num_workers: int | None = None
    # Registered agent loop of rows without an agent_name column (single_turn | tool_agent | openai_agent |
    # openenv).
    default_agent_loop: str = "single_turn"
    # Yaml list of agent loops in verl's format ([{name, _target_: AgentLoop class path}]), registered in
    # every process beside the @register_agent_loop decorator; None = none.
    agent_loop_config_path: str | None = None
    # Seconds the controller waits for one batch's rollout before the run fails naming what it waited
    # for (None = no bound).
    generate_timeout_s: float | None = 3600.0
    # The openai_agent loop's user agent and its time limit.
    openai: OpenAIAgentConfig = field(default_factory=OpenAIAgentConfig)
    # The openenv loop's environment.
    openenv: OpenEnvConfig = field(default_factory=OpenEnvConfig)


@dataclass
class RolloutConfig:
    """Generation backend, its placement and its sampling parameters."""

    # Registered rollout backend ("hf" or "vllm").
    name: str = "hf"
    # Where the rollout servers run: "hybrid" (in the actor's processes, weights synced in place) or
    # "standalone" (their own resource pool of nnodes x n_gpus_per_node, weights through "ray"); None: what
    # trainer.mode needs (standalone for one_step_off and fully_async, else hybrid).
    mode: str | None = None
    # Size of the standalone rollout pool (one server per slot); ignored in hybrid.
    nnodes: int = 1
    n_gpus_per_node: int = 1
    # Standalone only: times Ray restarts a rollout server whose process died (the replacement loads the
    # latest weights before it serves); its requests are retried on the live servers meanwhile. 0 = a dead
    # server is dropped. A hybrid server shares the actor's process, so its death ends the run.
    max_restarts: int = 2
    # Samples per prompt during training.
    n: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    do_sample: bool = True
    # Maximum prompt tokens (longer prompts are filtered or truncated by the dataset).
    prompt_length: int = 64
    # Maximum generated tokens per sample.
    response_length: int = 32
    # Most sequences a rollout server decodes together: hf gathers up to this many queued requests into one
    # batched generate; vLLM schedules at most this many at once.
    max_num_seqs: int = 256
    # Trajectories per forward when computing old log-probs (the actor's, before the update) on one rank.
    log_prob_micro_batch_size_per_gpu: int = 64
    # Cut the old-log-prob forwards by a token budget instead of a row count.
    log_prob_use_dynamic_bsz: bool = False
    # Token budget (prompt + response) of one old-log-prob forward per rank with log_prob_use_dynamic_bsz.
    log_prob_max_token_len_per_gpu: int = 16384
    # vLLM tensor-parallel size of one rollout engine; only 1 today (one engine per colocated worker).
    tensor_model_parallel_size: int = 1
    # Registered checkpoint-sync backend carrying actor weights to the rollout: "naive" (hybrid, in place),
    # "ray" (standalone); "nccl" is registered but not driven by the trainer yet. None: the placement's.
    checkpoint_engine: str | None = None
    # Bucket size for weight sync, in MB.
    update_weights_bucket_megabytes: int = 512
    # vLLM: KV-cache / memory share of the device, max model length, eager mode.
    gpu_memory_utilization: float = 0.5
    max_model_len: int | None = None
    enforce_eager: bool = True
    # Sleep the rollout from generation until the next weight sync when colocated with the actor (vLLM on
    # CUDA only; backends whose supports_sleep is False skip it with a one-line notice).
    free_cache_engine: bool = True
    # Sampling for validation (greedy, n = 1 by default).
    val_kwargs: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(n=1, temperature=0.0, do_sample=False)
    )
    agent: AgentConfig = field(default_factory=AgentConfig)
    # Multi-turn agent-loop limits and tools.
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)

    def train_sampling(self) -> SamplingConfig:
        """The sampling parameters of training rollouts."""
        return SamplingConfig(self.n, self.temperature, self.top_p, self.top_k, self.do_sample)

    def agent_loop_actors(self) -> int:
        """How many agent-loop worker actors to start: ``agent.num_workers``, else 0 hybrid / 1 standalone.

        With 0 each hybrid rollout server's process runs the agent loops of its share of a batch, so a
        request costs an await on the server's loop instead of a Ray call from another process.
        """
        if self.agent.num_workers is not None:
            return self.agent.num_workers
        return 1 if self.mode == "standalone" else 0


@dataclass
class ActorRolloutRefConfig:
    """Everything an ``ActorRolloutRefWorker`` needs (the ``actor_rollout_ref`` yaml group)."""

    model: RLModelConfig = field(default_factory=RLModelConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    ref: RefConfig = field(default_factory=RefConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)


@dataclass
class CriticWorkerConfig:
    """Everything a ``CriticWorker`` needs (the ``critic`` yaml group)."""

    model: RLModelConfig = field(default_factory=RLModelConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    # Rows per forward when computing values on one rank.
    log_prob_micro_batch_size_per_gpu: int = 64
    # Cut the value forwards by a token budget instead of a row count.
    log_prob_use_dynamic_bsz: bool = False
    # Token budget (prompt + response) of one value forward per rank with log_prob_use_dynamic_bsz.
    log_prob_max_token_len_per_gpu: int = 16384
