"""Check a whole PPO config before Ray starts: one clear sentence per problem, all problems at once."""

from __future__ import annotations

import dataclasses
import json
import os

from verl_lite.trainer.config import PPOConfig
from verl_lite.trainer.input_checks import (
    agent_name_problems,
    data_files,
    length_problems,
    overlong_prompt_problems,
)
from verl_lite.workers.config import RLModelConfig

# actor_rollout_ref.actor.old_log_prob values.
OLD_LOG_PROB_MODES = ("auto", "recompute")
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMBEDDED_MODEL = os.path.join(PACKAGE_DIR, "assets", "tiny_model")
EMBEDDED_DATA = os.path.join(PACKAGE_DIR, "assets", "synthetic")


class ConfigError(ValueError):
    """One or more configuration problems, each stated as one sentence naming key, value and fix."""


def resolve_embedded_defaults(config: PPOConfig) -> PPOConfig:
    """Fill the keys left null with the embedded tiny model and synthetic task."""
    model = config.actor_rollout_ref.model
    if not model.path:
        model.path = EMBEDDED_MODEL
    if not config.critic.model.path:
        config.critic.model.path = model.path
        config.critic.model.tokenizer_path = config.critic.model.tokenizer_path or model.tokenizer_path
    if not config.data.train_files:
        config.data.train_files = os.path.join(EMBEDDED_DATA, "train.parquet")
    if not config.data.val_files and config.data.train_files == os.path.join(EMBEDDED_DATA, "train.parquet"):
        config.data.val_files = os.path.join(EMBEDDED_DATA, "val.parquet")
    for optim in (config.actor_rollout_ref.actor.optim, config.critic.critic.optim):
        if optim.total_training_steps <= 1 and config.trainer.total_training_steps:
            optim.total_training_steps = config.trainer.total_training_steps
    return config


def resolve_local_paths(config: PPOConfig) -> PPOConfig:
    """Make user files the remote processes import absolute (they may start in another directory)."""
    config.trainer.extensions = [
        os.path.abspath(os.path.expanduser(e)) if e.endswith(".py") else e for e in config.trainer.extensions
    ]
    custom = config.reward.custom_reward_function
    if custom.path:
        absolute = dataclasses.replace(custom, path=os.path.abspath(os.path.expanduser(custom.path)))
        config.reward = dataclasses.replace(config.reward, custom_reward_function=absolute)
    agent_function = config.actor_rollout_ref.rollout.agent.openai.function
    if agent_function.path:
        agent_function.path = os.path.abspath(os.path.expanduser(agent_function.path))
    env = config.actor_rollout_ref.rollout.agent.openenv.env
    if env.path:
        env.path = os.path.abspath(os.path.expanduser(env.path))
    return config


def validate_config(config: PPOConfig) -> None:
    """Raise ``ConfigError`` listing every problem found (nothing expensive has started yet)."""
    problems = [
        *_batch_problems(config),
        *_name_problems(config),
        *_file_problems(config),
        *_algorithm_problems(config),
        *_checkpoint_problems(config),
        *_old_log_prob_problems(config),
        *_checkpoint_engine_problems(config),
        *_reward_model_problems(config),
        *_policy_loss_problems(config),
        *_replay_buffer_problems(config),
        *_val_batch_problems(config),
        *_rollout_problems(config),
        *_multi_turn_problems(config),
        *_openai_agent_problems(config),
        *_openenv_problems(config),
        *_model_problems(config),
        *_value_head_problems(config),
        *_engine_problems(config),
        *length_problems(config),
        *agent_name_problems(config),
    ]
    if not problems:
        problems = [*_model_folder_problems(config), *_data_row_problems(config)]
    if not problems:
        problems = [*_data_source_problems(config), *overlong_prompt_problems(config)]
    if problems:
        raise ConfigError("invalid configuration:\n- " + "\n- ".join(problems))


def _is_int(value, minimum: int | None = None) -> bool:
    """Whether ``value`` is an integer (not a bool) of at least ``minimum``."""
    return isinstance(value, int) and not isinstance(value, bool) and (minimum is None or value >= minimum)


def _batch_problems(config: PPOConfig) -> list[str]:
    out = []
    data, actor, rollout = config.data, config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
    dp = config.dp_size
    for key, value in (
        ("data.train_batch_size", data.train_batch_size),
        ("actor_rollout_ref.rollout.n", rollout.n),
        ("actor_rollout_ref.rollout.max_num_seqs", rollout.max_num_seqs),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", actor.ppo_mini_batch_size),
        ("trainer.n_gpus_per_node", config.trainer.n_gpus_per_node),
        ("trainer.nnodes", config.trainer.nnodes),
    ):
        if not _is_int(value, 1):
            out.append(f"{key}={value!r} must be a positive integer.")
    if out:
        return out
    if data.train_batch_size % actor.ppo_mini_batch_size:
        out.append(
            f"data.train_batch_size={data.train_batch_size} must be a multiple of "
            f"actor_rollout_ref.actor.ppo_mini_batch_size={actor.ppo_mini_batch_size}."
        )
    if (actor.ppo_mini_batch_size * rollout.n) % dp:
        out.append(
            f"actor_rollout_ref.actor.ppo_mini_batch_size x rollout.n = {actor.ppo_mini_batch_size * rollout.n} "
            f"trajectories must divide evenly over the {dp} data-parallel ranks (nnodes x n_gpus_per_node)."
        )
    if (data.train_batch_size * rollout.n) % dp:
        out.append(
            f"data.train_batch_size x rollout.n = {data.train_batch_size * rollout.n} must divide evenly over "
            f"the {dp} data-parallel ranks."
        )
    if config.use_critic:
        critic = config.critic.critic
        if (
            data.train_batch_size % critic.ppo_mini_batch_size
            or (critic.ppo_mini_batch_size * rollout.n) % dp
        ):
            out.append(
                f"critic.critic.ppo_mini_batch_size={critic.ppo_mini_batch_size} must divide "
                f"data.train_batch_size={data.train_batch_size} and, times rollout.n, the {dp} DP ranks."
            )
    return out


def _name_problems(config: PPOConfig) -> list[str]:
    import verl_lite.trainer.modes  # noqa: F401  register the built-in modes
    from verl_lite.algorithms import ADV_ESTIMATORS, POLICY_LOSSES
    from verl_lite.algorithms.aggregation import LOSS_AGG_MODES
    from verl_lite.reward import REWARD_MANAGERS
    from verl_lite.trainer.ppo.trainer_base import TRAINERS
    from verl_lite.trainer.tracking import LOGGERS
    from verl_lite.workers.agent_loop import AGENT_LOOPS
    from verl_lite.workers.engine import ENGINES
    from verl_lite.workers.rollout import ROLLOUTS

    checks = [
        ("algorithm.adv_estimator", config.algorithm.adv_estimator, ADV_ESTIMATORS),
        ("actor_rollout_ref.actor.policy_loss", config.actor_rollout_ref.actor.policy_loss, POLICY_LOSSES),
        (
            "actor_rollout_ref.actor.loss_agg_mode",
            config.actor_rollout_ref.actor.loss_agg_mode,
            LOSS_AGG_MODES,
        ),
        ("actor_rollout_ref.rollout.name", config.actor_rollout_ref.rollout.name, ROLLOUTS),
        (
            "actor_rollout_ref.rollout.agent.default_agent_loop",
            config.actor_rollout_ref.rollout.agent.default_agent_loop,
            AGENT_LOOPS,
        ),
        ("actor_rollout_ref.engine.name", config.actor_rollout_ref.engine.name, ENGINES),
        ("trainer.mode", config.trainer.mode, TRAINERS),
        ("reward.reward_manager", config.reward.reward_manager, REWARD_MANAGERS),
    ]
    from verl_lite.workers.agent_loop.base import agent_loop_name

    out = [
        f"{key}={value!r} is not registered; known: {', '.join(registry.names())}."
        for key, value, registry in checks
        if (agent_loop_name(value) if registry is AGENT_LOOPS else value) not in registry
    ]
    mode = config.trainer.mode
    rollout_mode = config.actor_rollout_ref.rollout.mode
    if mode in TRAINERS and TRAINERS.get(mode).placement == "standalone" and rollout_mode != "standalone":
        out.append(
            f"trainer.mode={mode!r} overlaps generation and training, so it needs "
            f"actor_rollout_ref.rollout.mode=standalone (got {rollout_mode!r}); leave it null to get it."
        )
    # a mode's own keys (e.g. magrpo's multi_agent functions), checked by the mode's config_problems
    if mode in TRAINERS:
        out += TRAINERS.get(mode).config_problems(config)
    bad_loggers = [name for name in config.trainer.logger if name not in LOGGERS]
    if bad_loggers:
        out.append(f"trainer.logger has unknown entries {bad_loggers}; valid: {', '.join(LOGGERS)}.")
    return out


def _file_problems(config: PPOConfig) -> list[str]:
    out = [
        f"{key}: file {path!r} does not exist."
        for key, path in data_files(config)
        if not os.path.exists(os.path.expanduser(path))
    ]
    model_path = config.model.path
    config_json = os.path.join(model_path, "config.json")
    if not os.path.isdir(model_path):
        out.append(f"actor_rollout_ref.model.path={model_path!r} is not a folder with a Hugging Face model.")
    elif os.path.exists(config_json):
        try:
            with open(config_json) as f:
                context = json.load(f).get("max_position_embeddings")
        except (OSError, ValueError) as err:
            context = None  # reported with the folder's other load problems (_model_folder_problems)
            out.append(
                f"actor_rollout_ref.model.path={model_path!r}: cannot load the model config "
                f"({type(err).__name__}: {_first_line(err)})."
            )
        total = config.data.max_prompt_length + config.data.max_response_length
        if context and total > context:
            out.append(
                f"data.max_prompt_length + data.max_response_length = {total} exceeds the model's context "
                f"of {context} tokens (max_position_embeddings in {config_json})."
            )
    custom = config.reward.custom_reward_function.path
    if custom and not os.path.exists(custom):
        out.append(f"reward.custom_reward_function.path: file {custom!r} does not exist.")
    return out


def _old_log_prob_problems(config: PPOConfig) -> list[str]:
    value = config.actor_rollout_ref.actor.old_log_prob
    if value not in OLD_LOG_PROB_MODES:
        return [
            f"actor_rollout_ref.actor.old_log_prob={value!r} is not valid; use one of {', '.join(OLD_LOG_PROB_MODES)}."
        ]
    return []


def _checkpoint_engine_problems(config: PPOConfig) -> list[str]:
    """The placement decides the weight sync: hybrid hands weights over in place, standalone sends them."""
    from verl_lite.checkpoint_engine import CHECKPOINT_ENGINES
    from verl_lite.trainer.placement import PLACEMENTS

    rollout = config.actor_rollout_ref.rollout
    key = "actor_rollout_ref.rollout"
    if rollout.mode not in PLACEMENTS:
        return [f"{key}.mode={rollout.mode!r} is not valid; use one of {', '.join(PLACEMENTS.names())}."]
    name = rollout.checkpoint_engine
    if name not in CHECKPOINT_ENGINES:
        return [
            f"{key}.checkpoint_engine={name!r} is not registered; known: {', '.join(CHECKPOINT_ENGINES.names())}."
        ]
    wanted = PLACEMENTS.get(rollout.mode).engine_placement
    if CHECKPOINT_ENGINES.get(name).placement != wanted:
        fits = [
            n
            for n in CHECKPOINT_ENGINES.names()
            if CHECKPOINT_ENGINES.get(n).placement == wanted and CHECKPOINT_ENGINES.get(n).driven_by_trainer
        ]
        return [
            f"{key}.checkpoint_engine={name!r} does not serve {key}.mode={rollout.mode!r}; "
            f"use one of {', '.join(fits)} (or leave it null)."
        ]
    problems = []
    if not CHECKPOINT_ENGINES.get(name).driven_by_trainer:
        problems.append(
            f"{key}.checkpoint_engine={name!r} is not driven by main_ppo's trainer yet; "
            "the standalone placement syncs through 'ray'."
        )
    if rollout.mode == "standalone":
        for field_name in ("nnodes", "n_gpus_per_node"):
            value = getattr(rollout, field_name)
            if not _is_int(value, 1):
                problems.append(f"{key}.{field_name}={value!r} is not valid; use an integer >= 1.")
        if not _is_int(rollout.max_restarts, 0):
            problems.append(f"{key}.max_restarts={rollout.max_restarts!r} is not valid; use an integer >= 0.")
    num_workers = rollout.agent.num_workers
    if num_workers is not None and not _is_int(num_workers, 1):
        problems.append(f"{key}.agent.num_workers={num_workers!r} is not valid; use null or an integer >= 1.")
    return problems


def _checkpoint_problems(config: PPOConfig) -> list[str]:
    """The checkpoint ``trainer.resume_mode`` picks must be complete and readable.

    With ``auto`` a damaged newest checkpoint is passed over for the next older readable one, which
    is said in one line on stderr (the controller makes the same choice).
    """
    import sys

    from verl_lite.trainer.checkpoint import RESUME_MODES, choose_resume_checkpoint

    trainer = config.trainer
    if trainer.resume_mode not in RESUME_MODES:
        return [
            f"trainer.resume_mode={trainer.resume_mode!r} is not valid; use one of {', '.join(RESUME_MODES)}."
        ]
    try:
        path, skipped = choose_resume_checkpoint(
            trainer.resume_mode, trainer.checkpoint_dir, trainer.resume_from_path
        )
    except ValueError as err:
        return [str(err)]
    if skipped:
        more = f" (and {len(skipped) - 1} older damaged one(s))" if len(skipped) > 1 else ""
        print(f"verl_lite: {skipped[0]}{more}; resuming from the older {path!r} instead.", file=sys.stderr)
    return []


def _algorithm_problems(config: PPOConfig) -> list[str]:
    out = []
    from verl_lite.algorithms import ADV_ESTIMATORS, EstimatorNeeds, get_adv_estimator_needs

    estimator, n = config.algorithm.adv_estimator, config.actor_rollout_ref.rollout.n
    # an unknown name is reported by _name_problems
    needs = get_adv_estimator_needs(estimator) if estimator in ADV_ESTIMATORS else EstimatorNeeds()
    if (
        needs.values
        and config.critic.enable is False
        and not config.actor_rollout_ref.actor.value_head.enable
    ):
        out.append(
            f"algorithm.adv_estimator={estimator!r} needs a critic, but critic.enable=false; enable the "
            "critic (or actor_rollout_ref.actor.value_head.enable) or choose a critic-free estimator such as grpo."
        )
    if needs.groups and n < 2:
        out.append(
            f"algorithm.adv_estimator={estimator!r} compares samples of one prompt and needs "
            f"actor_rollout_ref.rollout.n >= 2, got {n}."
        )
    if config.reward.reward_model.enable and needs.greedy_baseline:
        out.append(
            f"algorithm.adv_estimator={estimator!r} scores a greedy baseline with the rule-based reward "
            "manager only, which would not match reward.reward_model.enable=true scores; disable the "
            "reward model or choose an estimator without a greedy baseline (e.g. grpo)."
        )
    epsilon = config.algorithm.epsilon
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or epsilon <= 0:
        out.append(
            f"algorithm.epsilon={epsilon!r} is invalid; use a number > 0 (it is added to the group std, "
            "which is 0 in an all-equal group)."
        )
    if config.data.truncation not in ("error", "left", "right"):
        out.append(f"data.truncation={config.data.truncation!r} must be one of error, left, right.")
    return out


def _policy_loss_problems(config: PPOConfig) -> list[str]:
    """Every policy-loss parameter in range (the rules the worker's configs apply; algorithm.rollout_correction
    checks itself as it is built)."""
    from verl_lite.algorithms.config import PolicyLossConfig, policy_loss_problems

    actor, prefix = config.actor_rollout_ref.actor, "actor_rollout_ref.actor."
    values = {f.name: getattr(actor, f.name) for f in dataclasses.fields(PolicyLossConfig)}
    out = policy_loss_problems(values, prefix)
    scale = actor.loss_scale_factor
    if scale is not None and not (isinstance(scale, (int, float)) and scale > 0):
        out.append(f"{prefix}loss_scale_factor={scale!r} is invalid; use a number of tokens > 0, or null.")
    return out


def _val_batch_problems(config: PPOConfig) -> list[str]:
    size = config.data.val_batch_size
    if size is not None and not _is_int(size, 1):
        return [
            f"data.val_batch_size={size!r} is invalid; use a positive integer (prompts per validation "
            "generate call) or null for all at once."
        ]
    return []


def _replay_buffer_problems(config: PPOConfig) -> list[str]:
    """DAPO's refill bound and the staleness control of the replay buffer."""
    from verl_lite.trainer.ppo.replay_buffer import OFF_POLICY_STRATEGIES
    from verl_lite.trainer.ppo.trainer_base import TRAINERS

    mode = config.trainer.mode
    out = []
    max_gen = config.algorithm.filter_groups.max_num_gen_batches
    if not _is_int(max_gen):
        out.append(
            f"algorithm.filter_groups.max_num_gen_batches={max_gen!r} is invalid; use an integer "
            "(extra generation rounds per step, <= 0 for no limit)."
        )
    staleness = config.trainer.replay_buffer
    threshold = staleness.max_off_policy_threshold
    if threshold is not None and not _is_int(threshold, 0):
        out.append(
            f"trainer.replay_buffer.max_off_policy_threshold={threshold!r} is invalid; use an integer >= 0 "
            "(steps) or null to disable staleness control."
        )
    refill = staleness.max_refill_batches
    if not _is_int(refill):
        out.append(
            f"trainer.replay_buffer.max_refill_batches={refill!r} is invalid; use an integer (replacement "
            "groups per step, in units of data.train_batch_size; <= 0 for no limit)."
        )
    sync_step = config.trainer.parameter_sync_step
    if not _is_int(sync_step, 1):
        out.append(
            f"trainer.parameter_sync_step={sync_step!r} is invalid; use an integer >= 1 (updates between "
            "two weight syncs)."
        )
    elif (
        mode in TRAINERS
        and TRAINERS.get(mode).streams_rollout
        and (threshold is None or (isinstance(threshold, int) and threshold < sync_step - 1))
    ):
        out.append(
            f"trainer.mode={mode} needs trainer.replay_buffer.max_off_policy_threshold >= "
            f"trainer.parameter_sync_step - 1 = {sync_step - 1} (got {threshold!r}): the rollout serves "
            f"weights up to {sync_step - 1} versions old between two syncs."
        )
    if staleness.off_policy_strategy not in OFF_POLICY_STRATEGIES:
        out.append(
            f"trainer.replay_buffer.off_policy_strategy={staleness.off_policy_strategy!r} is invalid; "
            f"use one of {', '.join(OFF_POLICY_STRATEGIES)}."
        )
    return out


def _reward_model_problems(config: PPOConfig) -> list[str]:
    """The reward model must be a one-label sequence classifier folder (what main_rm exports)."""
    rm = config.reward.reward_model
    if not rm.enable:
        return []
    config_json = os.path.join(os.path.expanduser(rm.model.path), "config.json")
    if not os.path.exists(config_json):
        return [
            f"reward.reward_model.model.path={rm.model.path!r} is not a folder with a Hugging Face model "
            "(no config.json); point it at main_rm's export (trainer.default_local_dir/hf)."
        ]
    with open(config_json) as f:
        hf_config = json.load(f)
    architectures = hf_config.get("architectures") or []
    if architectures and not any(a.endswith("ForSequenceClassification") for a in architectures):
        return [
            f"reward.reward_model.model.path={rm.model.path!r} holds a {architectures[0]}, not a sequence "
            "classifier; train one with python -m verl_lite.main_rm and use its export."
        ]
    labels = len(hf_config.get("id2label") or {"0": ""})
    if labels != 1:
        return [
            f"reward.reward_model.model.path={rm.model.path!r} is a classifier with {labels} labels; a reward "
            "model needs num_labels=1 (one scalar score)."
        ]
    return []


def _rollout_problems(config: PPOConfig) -> list[str]:
    """Each colocated worker runs its own rollout engine on its one device: no tensor parallelism yet."""
    tp = config.actor_rollout_ref.rollout.tensor_model_parallel_size
    if tp == 1:
        return []
    return [
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp} is not supported: each worker runs its "
        "own rollout engine on its one device, so use 1 and scale generation with trainer.n_gpus_per_node."
    ]


def _multi_turn_problems(config: PPOConfig) -> list[str]:
    """Limits, truncation side, parser name and tool file of ``actor_rollout_ref.rollout.multi_turn``."""
    from verl_lite.workers.agent_loop.tool_agent import TRUNCATE_SIDES
    from verl_lite.workers.tools import TOOL_PARSERS, ToolConfigError, load_tools

    mt, key = config.actor_rollout_ref.rollout.multi_turn, "actor_rollout_ref.rollout.multi_turn"
    out = []
    for name in ("max_assistant_turns", "max_user_turns"):
        value = getattr(mt, name)
        if value is not None and not _is_int(value, 1):
            out.append(f"{key}.{name}={value!r} must be a positive integer or null (no limit).")
    for name in ("max_parallel_calls", "max_tool_response_length"):
        value = getattr(mt, name)
        if not _is_int(value, 1):
            out.append(f"{key}.{name}={value!r} must be a positive integer.")
    if mt.tool_response_truncate_side not in TRUNCATE_SIDES:
        out.append(
            f"{key}.tool_response_truncate_side={mt.tool_response_truncate_side!r} must be one of "
            f"{', '.join(TRUNCATE_SIDES)}."
        )
    if mt.format not in TOOL_PARSERS:
        out.append(
            f"{key}.format={mt.format!r} is not a registered tool-call parser; known: {', '.join(TOOL_PARSERS)}."
        )
    if not isinstance(mt.tool_timeout_s, int | float) or mt.tool_timeout_s <= 0:
        out.append(f"{key}.tool_timeout_s={mt.tool_timeout_s!r} must be a positive number of seconds.")
    if mt.tool_config_path:
        try:
            load_tools(mt.tool_config_path)
        except ToolConfigError as err:
            out.append(f"{key}.tool_config_path: {err}")
    if mt.interaction_config_path:
        from verl_lite.workers.interactions import InteractionConfigError, load_interactions

        try:
            load_interactions(mt.interaction_config_path)
        except InteractionConfigError as err:
            out.append(f"{key}.interaction_config_path: {err}")
    return out


def _openai_agent_problems(config: PPOConfig) -> list[str]:
    """The openai_agent loop's agent function loads (when the loop is chosen or a file is named)."""
    from verl_lite.workers.agent_loop.openai_agent import load_agent

    agent, key = config.actor_rollout_ref.rollout.agent, "actor_rollout_ref.rollout.agent.openai"
    out = []
    if not isinstance(agent.openai.timeout_s, int | float) or agent.openai.timeout_s <= 0:
        out.append(f"{key}.timeout_s={agent.openai.timeout_s!r} must be a positive number of seconds.")
    chosen = "openai_agent" in (agent.default_agent_loop, config.data.agent_name)
    if chosen or agent.openai.function.path:
        try:
            load_agent(agent.openai.function.path, agent.openai.function.name)
        except Exception as err:  # the user's file: any import error is reported, not raised
            out.append(
                str(err) if isinstance(err, ValueError) else f"{key}.function: {type(err).__name__}: {err}"
            )
    return out


def _openenv_problems(config: PPOConfig) -> list[str]:
    """The openenv loop's environment class loads and declares a usable action (when the loop is chosen or
    a class is named)."""
    from verl_lite.workers.agent_loop.openenv_agent import load_env

    agent = config.actor_rollout_ref.rollout.agent
    chosen = "openenv" in (agent.default_agent_loop, config.data.agent_name)
    if not (chosen or agent.openenv.env.name or agent.openenv.env.path):
        return []
    try:
        load_env(agent.openenv.env.path, agent.openenv.env.name)
    except Exception as err:  # the user's file: any import error is reported, not raised
        if isinstance(err, ValueError):
            return [str(err)]
        return [f"actor_rollout_ref.rollout.agent.openenv.env: {type(err).__name__}: {err}"]
    return []


def _model_problems(config: PPOConfig) -> list[str]:
    """LoRA settings of the policy and critic models (packing needs no check)."""
    out = []
    models = [("actor_rollout_ref.model", config.actor_rollout_ref.model)]
    if config.use_critic:
        models.append(("critic.model", config.critic.model))
    for key, model in models:
        out += lora_problems(key, model)
        rank = model.lora_rank
        if key.startswith("actor") and config.actor_rollout_ref.rollout.name == "vllm" and rank > 512:
            out.append(f"{key}.lora_rank={rank} is above 512, the largest LoRA rank vLLM serves.")
    return out


def _value_head_problems(config: PPOConfig) -> list[str]:
    """A value head on the actor: something reads its values, no critic beside it, no critic-only warm-up."""
    head, key = config.actor_rollout_ref.actor.value_head, "actor_rollout_ref.actor.value_head"
    if not head.enable:
        return []
    from verl_lite.algorithms import ADV_ESTIMATORS, get_adv_estimator_needs

    out = []
    estimator = config.algorithm.adv_estimator
    if estimator in ADV_ESTIMATORS and not get_adv_estimator_needs(estimator).values:
        out.append(
            f"{key}.enable=true trains values that algorithm.adv_estimator={estimator!r} never reads; use an "
            "estimator with a critic (gae) or turn the head off."
        )
    if config.critic.enable:
        out.append(f"{key}.enable=true and critic.enable=true both learn the values; keep one of them.")
    if config.trainer.critic_warmup > 0:
        out.append(
            f"trainer.critic_warmup={config.trainer.critic_warmup} trains a critic alone first, but {key} learns "
            "in the actor's update; set it to 0 or use a separate critic."
        )
    if head.hidden_dim is not None and not _is_int(head.hidden_dim, 1):
        out.append(f"{key}.hidden_dim={head.hidden_dim!r} must be a positive integer or null.")
    if not isinstance(head.loss_coef, (int, float)) or head.loss_coef < 0:
        out.append(f"{key}.loss_coef={head.loss_coef!r} must be a number >= 0.")
    clip = head.cliprange_value
    if clip is not None and (not isinstance(clip, (int, float)) or clip <= 0):
        out.append(f"{key}.cliprange_value={clip!r} must be a number > 0, or null for no clipping.")
    return out


def lora_problems(key: str, model: RLModelConfig) -> list[str]:
    """One sentence per invalid LoRA setting of ``model`` (the config group at ``key``)."""
    out = []
    rank, target = model.lora_rank, model.target_modules
    if not _is_int(rank, 0):
        return [f"{key}.lora_rank={rank!r} must be a non-negative integer (0 = no LoRA)."]
    if rank and not model.lora_alpha > 0:
        out.append(f"{key}.lora_alpha={model.lora_alpha!r} must be positive.")
    if rank and not 0.0 <= model.lora_dropout < 1.0:
        out.append(f"{key}.lora_dropout={model.lora_dropout!r} must be in [0, 1).")
    names_ok = isinstance(target, (list, tuple)) and target and all(isinstance(t, str) for t in target)
    if rank and target != "all-linear" and not names_ok:
        out.append(f"{key}.target_modules={target!r} must be all-linear or a non-empty list of module names.")
    return out


def _engine_problems(config: PPOConfig) -> list[str]:
    """Process-group backend and GPU compute dtype of the policy and critic engines."""
    from verl_lite.workers.engine.device import BACKENDS

    out = []
    engines = [("actor_rollout_ref.engine", config.actor_rollout_ref.engine)]
    if config.use_critic:
        engines.append(("critic.engine", config.critic.engine))
    for key, engine in engines:
        if engine.backend not in BACKENDS:
            out.append(f"{key}.backend={engine.backend!r} is not valid; use one of {', '.join(BACKENDS)}.")
        if engine.param_dtype not in ("bfloat16", "float32"):
            out.append(f"{key}.param_dtype={engine.param_dtype!r} is not valid; use bfloat16 or float32.")
    return out


def _data_source_problems(config: PPOConfig) -> list[str]:
    """Every ``data_source`` of the data files (the default for rows without one) has a scorer."""
    from verl_lite.data.files import DataFileError, read_column
    from verl_lite.reward import validate_reward_config

    sources, unreadable, default = set(), [], config.data.default_data_source
    for key, path in data_files(config):
        try:
            values = read_column(path, "data_source", key)
        except DataFileError as err:
            unreadable.append(str(err))
            continue
        sources |= {default} if values is None else {default if v is None else v for v in values}
    if unreadable:
        return unreadable
    try:
        validate_reward_config(config.reward, sources)
    except ValueError as err:
        return [str(err)]
    return []


def _model_folder_problems(config: PPOConfig) -> list[str]:
    """The model folders load their config and the tokenizer loads (no weights are read)."""
    from transformers import AutoConfig, AutoTokenizer

    model = config.model
    folders = [("actor_rollout_ref.model.path", model.path, model.trust_remote_code)]
    if config.use_critic and config.critic.model.path != model.path:
        folders.append(("critic.model.path", config.critic.model.path, config.critic.model.trust_remote_code))
    out = []
    for key, path, remote in folders:
        if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "config.json")):
            out.append(f"{key}={path!r} has no config.json; point it at a Hugging Face model folder.")
            continue
        try:
            AutoConfig.from_pretrained(path, trust_remote_code=remote)
        except Exception as err:  # OSError, ValueError, json errors: transformers raises many kinds
            out.append(
                f"{key}={path!r}: cannot load the model config ({type(err).__name__}: {_first_line(err)})."
            )
    key = "actor_rollout_ref.model.tokenizer_path" if model.tokenizer_path else "actor_rollout_ref.model.path"
    path = model.tokenizer_path or model.path
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=model.trust_remote_code)
    except Exception as err:
        return [
            *out,
            f"{key}={path!r}: cannot load the tokenizer ({type(err).__name__}: {_first_line(err)}).",
        ]
    if not getattr(tokenizer, "chat_template", None):
        out.append(f"{key}={path!r}: the tokenizer has no chat_template; prompts are rendered with it.")
    return out


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [""])[0]


def _data_row_problems(config: PPOConfig) -> list[str]:
    """Each data file has at least one usable row (prompt and ground truth present; counts of the rest)."""
    from verl_lite.data.files import DataFileError, read_column
    from verl_lite.data.rl_dataset import row_skip_reason

    prompt_key = config.data.prompt_key
    out = []
    for key, path in data_files(config):
        try:
            prompts = read_column(path, prompt_key, key)
            rewards = read_column(path, "reward_model", key)
        except DataFileError as err:
            out.append(str(err))
            continue
        if prompts is None:
            out.append(
                f"{key}: 0 usable rows in {path!r}: no row has the prompt column {prompt_key!r} "
                "(data.prompt_key)."
            )
            continue
        num_rows = len(prompts)
        rewards = rewards or [None] * num_rows
        reasons: dict[str, int] = {}
        for prompt, reward in zip(prompts, rewards):
            reason = row_skip_reason({prompt_key: prompt, "reward_model": reward}, prompt_key)
            if reason is not None:
                reasons[reason] = reasons.get(reason, 0) + 1
        if sum(reasons.values()) == num_rows:
            detail = ", ".join(f"{n} {reason}" for reason, n in reasons.items())
            out.append(f"{key}: 0 usable rows in {path!r} ({num_rows} skipped: {detail}).")
    return out
