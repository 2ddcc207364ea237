"""Translate verl's command-line keys into verl_lite's before Hydra composes the config.

verl's example scripts set keys verl_lite spells differently (``critic.optim.lr`` is
``critic.critic.optim.lr``, ``reward_model.enable`` is ``reward.reward_model.enable``), keys it has no
use for (``use_liger``, ``data.dataloader_num_workers``) and verl values of shared keys
(``rollout.mode=async``). :data:`VERL_KEYS` says, per verl key or key family, which verl_lite keys take
the value, which values pass silently, which pass with a one-line notice of what verl_lite does instead,
and which are refused with one sentence naming the verl_lite equivalent. :func:`translate_overrides`
applies that to an override list, so Hydra only ever sees verl_lite's own keys (never answers
``Could not override``) and every refusal is raised before Ray starts.

verl keys with verl_lite's spelling and meaning (``fsdp_config.param_offload``,
``ref.log_prob_micro_batch_size_per_gpu`` ...) are ordinary keys of the yaml and dataclasses, not listed
here; docs/migrating_from_verl.md covers both kinds.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from verl_lite.trainer.validation import ConfigError

ARR = "actor_rollout_ref"
# Hydra's command-line flags that take no value (the others, --config-name x, take the next argument).
_BARE_FLAGS = ("-m", "--multirun", "--resolve", "-h", "--help", "--hydra-help", "--version")
_OVERRIDE = re.compile(r"^(?P<prefix>[~+]*)(?P<key>[A-Za-z_][\w.]*)(?P<rest>=.*)?$", re.DOTALL)


@dataclass(frozen=True)
class VerlKey:
    """How verl_lite takes one verl key, or every key under it (``verl="critic.optim"``), from a command line.

    An override of a key under ``verl`` goes to each path in ``ours`` with the same tail
    (``critic.optim.lr`` -> ``critic.critic.optim.lr``); with no ``ours`` it is dropped. A value in
    ``quiet`` passes silently; any other value is refused with ``refusal`` when that is set, and otherwise
    passes with ``notice`` (silently when that is empty). ``values`` maps verl values to verl_lite's
    (a key listing them matches only those values), and ``sets`` are ``(key, value)`` overrides a
    noticed value also applies.
    """

    verl: str
    ours: tuple[str, ...] = ()
    quiet: tuple[Any, ...] = ()
    notice: str = ""
    refusal: str = ""
    values: dict[Any, str] = field(default_factory=dict)
    sets: tuple[tuple[str, str], ...] = ()

    def matches(self, key: str) -> bool:
        """Whether ``key`` is this verl key or lies under it."""
        return key == self.verl or key.startswith(self.verl + ".")


def _renamed(pairs: dict[str, str], notice: str = "") -> tuple[VerlKey, ...]:
    """Keys verl_lite has under another path, with verl's meaning (``{verl path: verl_lite path}``)."""
    return tuple(VerlKey(verl, ours=(ours,), notice=notice) for verl, ours in pairs.items())


def _optim_renames(verl: str, ours: str) -> dict[str, str]:
    """verl's optimizer leaves under ``verl`` and verl_lite's names for them under ``ours``."""
    leaves = {
        "lr_warmup_steps": "warmup_steps",
        "lr_warmup_steps_ratio": "warmup_steps_ratio",
        "warmup_style": "lr_scheduler",
        "lr_scheduler_type": "lr_scheduler",
        "clip_grad": "grad_clip",
    }
    return {f"{verl}.{a}": f"{ours}.{b}" for a, b in leaves.items()}


_CRITIC_UPDATE = (
    "ppo_mini_batch_size",
    "ppo_micro_batch_size_per_gpu",
    "use_dynamic_bsz",
    "ppo_max_token_len_per_gpu",
    "ppo_epochs",
    "shuffle",
    "cliprange_value",
    "loss_agg_mode",
)
_ENGINE = "is the training engine; verl_lite's is {key}=fsdp (FSDP2), set once for {who}."
_NO_SP = "verl_lite has no sequence parallelism; use 1 (use_dynamic_bsz bounds the tokens per micro-batch)."

VERL_KEYS: tuple[VerlKey, ...] = (
    # ---- data
    VerlKey(
        "data.return_raw_chat",
        quiet=(False,),
        notice="not needed; the reward always gets the templated prompt text (raw_prompt) and the "
        "rollout works on token ids.",
    ),
    VerlKey(
        "data.dataloader_num_workers",
        notice="not used; verl_lite reads and tokenizes the prompts once, in the controller's process.",
    ),
    VerlKey("data.filter_overlong_prompts_workers", notice="not used; prompts are filtered in one process."),
    VerlKey(
        "data.return_full_prompt", quiet=(False,), notice="not used; the prompt is always kept as raw_prompt."
    ),
    VerlKey("data.return_raw_input_ids", quiet=(False,), notice="not used; the rollout works on token ids."),
    VerlKey("data.use_shm", quiet=(False,), notice="not used; files are read from their path."),
    VerlKey(
        "data.reward_fn_key",
        quiet=("data_source",),
        refusal="verl_lite picks the scorer by the data_source column (data.default_data_source for rows "
        "without one).",
    ),
    VerlKey(
        "data.gen_batch_size",
        notice="not used; DAPO's refills draw data.train_batch_size prompts per extra round "
        "(algorithm.filter_groups.max_num_gen_batches bounds the rounds).",
    ),
    VerlKey("data.image_key", quiet=("images",), notice="not used; verl_lite's prompts are text only."),
    VerlKey("data.video_key", quiet=("videos",), notice="not used; verl_lite's prompts are text only."),
    VerlKey(
        "data.custom_cls",
        quiet=(None,),
        refusal="verl_lite has one dataset class; turn other formats into parquet or jsonl prompt rows.",
    ),
    VerlKey(
        "data.sampler", quiet=(None,), notice="not used; prompts are shuffled by data.shuffle and data.seed."
    ),
    VerlKey("data.datagen", quiet=(None,), refusal="verl_lite reads fixed prompt files only."),
    VerlKey(
        "data.tokenizer",
        quiet=(None,),
        refusal="set actor_rollout_ref.model.tokenizer_path to the tokenizer folder instead.",
    ),
    # ---- model
    VerlKey(
        f"{ARR}.model.use_liger",
        quiet=(False,),
        notice="not used; verl_lite runs the model's own Hugging Face kernels.",
    ),
    VerlKey(
        f"{ARR}.model.use_fused_kernels",
        quiet=(False,),
        notice="not used; verl_lite computes log-probs from logits of the response positions only.",
    ),
    VerlKey(f"{ARR}.model.use_shm", quiet=(False,), notice="not used; the model is read from its path."),
    VerlKey(
        f"{ARR}.model.enable_activation_offload",
        quiet=(False,),
        notice="not in verl_lite; actor_rollout_ref.model.enable_gradient_checkpointing saves activation memory.",
    ),
    VerlKey(
        f"{ARR}.model.external_lib",
        quiet=(None,),
        refusal="list the module in trainer.extensions, which imports it in every process.",
    ),
    VerlKey(f"{ARR}.model.override_config", notice="not used; the model's own config.json applies."),
    VerlKey(
        f"{ARR}.model.exclude_modules",
        quiet=(None,),
        refusal="list the modules that get adapters in actor_rollout_ref.model.target_modules instead.",
    ),
    VerlKey(
        f"{ARR}.model.lora_adapter_path",
        quiet=(None,),
        refusal="verl_lite starts adapters fresh; continue a LoRA run from its checkpoint (trainer.resume_mode).",
    ),
    VerlKey(
        f"{ARR}.model.custom_chat_template",
        quiet=(None,),
        refusal="put the template in a tokenizer folder and set actor_rollout_ref.model.tokenizer_path to it.",
    ),
    VerlKey(
        f"{ARR}.hybrid_engine",
        quiet=(True,),
        refusal="verl_lite's actor, reference and rollout always share one worker; "
        "actor_rollout_ref.rollout.mode=standalone gives the rollout its own pool.",
    ),
    VerlKey(f"{ARR}.nccl_timeout", notice="not used; verl_lite keeps torch's process-group timeout."),
    # ---- actor and reference
    VerlKey(
        f"{ARR}.actor.strategy",
        quiet=("fsdp", "fsdp2"),
        refusal=_ENGINE.format(key=f"{ARR}.engine.name", who="actor and reference"),
    ),
    VerlKey(
        f"{ARR}.ref.strategy",
        quiet=("fsdp", "fsdp2"),
        refusal=_ENGINE.format(key=f"{ARR}.engine.name", who="actor and reference"),
    ),
    VerlKey(f"{ARR}.actor.clip_ratio", ours=(f"{ARR}.actor.clip_ratio_low", f"{ARR}.actor.clip_ratio_high")),
    *_renamed(
        {
            f"{ARR}.actor.policy_loss.loss_mode": f"{ARR}.actor.policy_loss",
            f"{ARR}.actor.grad_clip": f"{ARR}.actor.optim.grad_clip",
            **_optim_renames(f"{ARR}.actor.optim", f"{ARR}.actor.optim"),
        }
    ),
    VerlKey(
        f"{ARR}.actor.tis_imp_ratio_cap",
        ours=("algorithm.rollout_correction.rollout_is_threshold",),
        quiet=(None, -1),
        sets=(("algorithm.rollout_correction.rollout_is", "token"),),
        notice="verl's older truncated importance sampling; runs as algorithm.rollout_correction.rollout_is=token "
        "with this cap.",
    ),
    VerlKey(
        f"{ARR}.actor.ppo_micro_batch_size",
        quiet=(None,),
        refusal="is verl's deprecated global micro-batch; use actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu.",
    ),
    VerlKey(f"{ARR}.actor.ulysses_sequence_parallel_size", quiet=(1,), refusal=_NO_SP),
    VerlKey(f"{ARR}.ref.ulysses_sequence_parallel_size", quiet=(1,), refusal=_NO_SP),
    VerlKey(f"{ARR}.actor.use_torch_compile", quiet=(True, False)),
    VerlKey(f"{ARR}.ref.use_torch_compile", quiet=(True, False)),
    VerlKey(
        f"{ARR}.actor.checkpoint",
        notice="verl_lite's checkpoints always hold the model, optimizer, scheduler and RNG state.",
    ),
    VerlKey(f"{ARR}.actor.entropy_from_logits_with_chunking", quiet=(False,), notice="not used."),
    VerlKey(f"{ARR}.actor.entropy_checkpointing", quiet=(False,), notice="not used."),
    VerlKey(
        f"{ARR}.actor.fsdp_config.fsdp_size",
        quiet=(-1,),
        notice="not used; every decoder layer is sharded over all ranks.",
    ),
    *(
        VerlKey(f"{ARR}.{role}.fsdp_config.{leaf}", notice="not used; each decoder layer is one FSDP2 unit.")
        for role in ("actor", "ref")
        for leaf in ("wrap_policy", "offload_policy", "reshard_after_forward", "forward_prefetch")
    ),
    VerlKey(
        f"{ARR}.actor.fsdp_config.model_dtype",
        notice="not used; the compute dtype is actor_rollout_ref.engine.param_dtype.",
    ),
    # ---- rollout
    VerlKey(
        f"{ARR}.rollout.mode",
        ours=(f"{ARR}.rollout.mode",),
        values={"sync": "hybrid", "async": "hybrid"},
        notice="runs as hybrid: verl_lite's rollout is always servers driven by agent loops, here in the "
        "actor's processes.",
    ),
    VerlKey(
        f"{ARR}.rollout.multi_turn.enable",
        quiet=(False,),
        notice="verl_lite picks the agent loop per row (an agent_name column) or by "
        "actor_rollout_ref.rollout.agent.default_agent_loop; true sets that to tool_agent.",
        sets=((f"{ARR}.rollout.agent.default_agent_loop", "tool_agent"),),
    ),
    VerlKey(
        f"{ARR}.rollout.multi_turn.use_inference_chat_template",
        notice="not needed; verl_lite trains on exactly the tokens the rollout saw and sampled (one rendering "
        "of the chat template).",
    ),
    VerlKey(
        f"{ARR}.rollout.multi_turn.tokenization_sanity_check_mode",
        notice="not needed; verl_lite never re-tokenizes a turn (observations are the chat template's token "
        "difference), so there is nothing to check.",
    ),
    VerlKey(
        f"{ARR}.rollout.multi_stage_wake_up",
        quiet=(False,),
        notice="not used; the rollout wakes in one stage (weights, then KV cache) after each weight sync.",
    ),
    VerlKey(
        f"{ARR}.rollout.over_sample_rate",
        quiet=(0, 0.0),
        notice="not used; each step waits for all its trajectories (trainer.mode=fully_async streams instead).",
    ),
    VerlKey(f"{ARR}.rollout.calculate_log_probs", quiet=(True, False)),
    VerlKey(f"{ARR}.rollout.dtype", quiet=("bfloat16",), notice="not used; bfloat16 on GPU, float32 on CPU."),
    VerlKey(f"{ARR}.rollout.enable_chunked_prefill", notice="not used; vLLM's default applies."),
    VerlKey(f"{ARR}.rollout.max_num_batched_tokens", notice="not used; vLLM's default applies."),
    VerlKey(f"{ARR}.rollout.load_format", notice="not used; weights always come from the actor's sync."),
    VerlKey(
        f"{ARR}.rollout.layered_summon", quiet=(False,), notice="not used; the sync sends weights in buckets."
    ),
    VerlKey(
        f"{ARR}.rollout.ignore_eos", quiet=(False,), refusal="verl_lite always stops at EOS; leave it false."
    ),
    VerlKey(f"{ARR}.rollout.engine_kwargs", notice="not used; vLLM runs with verl_lite's settings."),
    VerlKey(f"{ARR}.rollout.trace", notice="not used; trainer.rollout_data_dir dumps every trajectory."),
    # ---- critic
    *_renamed(_optim_renames("critic.optim", "critic.critic.optim")),
    *_renamed({"critic.optim": "critic.critic.optim", "critic.grad_clip": "critic.critic.optim.grad_clip"}),
    *_renamed({f"critic.{k}": f"critic.critic.{k}" for k in _CRITIC_UPDATE}),
    *_renamed(
        {
            "critic.forward_micro_batch_size_per_gpu": "critic.log_prob_micro_batch_size_per_gpu",
            "critic.forward_max_token_len_per_gpu": "critic.log_prob_max_token_len_per_gpu",
        }
    ),
    VerlKey(
        "critic.strategy",
        quiet=("fsdp", "fsdp2"),
        refusal=_ENGINE.format(key="critic.engine.name", who="the critic"),
    ),
    VerlKey(
        "critic.ppo_micro_batch_size",
        quiet=(None,),
        refusal="is verl's deprecated global micro-batch; use critic.ppo_micro_batch_size_per_gpu.",
    ),
    VerlKey("critic.ulysses_sequence_parallel_size", quiet=(1,), refusal=_NO_SP),
    VerlKey("critic.rollout_n"),  # verl's copy of rollout.n; verl_lite reads rollout.n itself
    VerlKey(
        "critic.model.fsdp_config",
        quiet=(False,),
        notice="not used; the critic keeps its parameters and optimizer state on the device.",
    ),
    VerlKey("critic.checkpoint", notice="verl_lite's checkpoints always hold the critic's full state."),
    # ---- reward: verl's top-level reward_model and custom_reward_function live under reward
    VerlKey(
        "reward_model.model.input_tokenizer",
        notice="not needed; ids pass through when the vocabularies match, else text is re-encoded with the "
        "reward model's tokenizer.",
    ),
    VerlKey(
        "reward_model.model.fsdp_config",
        quiet=(False,),
        notice="not used; the reward model stays on the device.",
    ),
    VerlKey("reward_model.model.use_remove_padding", quiet=(False,), notice="not used for the reward model."),
    *_renamed(
        {
            "reward_model.reward_manager": "reward.reward_manager",
            "reward_model.enable": "reward.reward_model.enable",
            "reward_model.model": "reward.reward_model.model",
            "reward_model.micro_batch_size_per_gpu": "reward.reward_model.micro_batch_size_per_gpu",
            "reward_model.overlong_buffer": "reward.overlong_buffer",
            "reward_model.reward_kwargs": "reward.reward_kwargs",
            "custom_reward_function": "reward.custom_reward_function",
        }
    ),
    VerlKey(
        "reward_model.strategy",
        quiet=("fsdp", "fsdp2"),
        refusal="verl_lite's reward model runs on FSDP2 (fsdp) only.",
    ),
    VerlKey(
        "reward_model.launch_reward_fn_async",
        quiet=(False,),
        notice="not needed; verl_lite scores each trajectory in the agent-loop workers as it finishes.",
    ),
    VerlKey(
        "reward_model.micro_batch_size", quiet=(None,), refusal="use reward_model.micro_batch_size_per_gpu."
    ),
    VerlKey(
        "reward_model.max_length", notice="not used; the reward model scores the whole prompt and response."
    ),
    VerlKey(
        "reward_model.use_dynamic_bsz", quiet=(False,), notice="not used; the reward model batches by count."
    ),
    VerlKey(
        "reward_model.forward_max_token_len_per_gpu", notice="not used; the reward model batches by count."
    ),
    VerlKey("reward_model.ulysses_sequence_parallel_size", quiet=(1,), refusal=_NO_SP),
    VerlKey(
        "reward_model.sandbox_fusion",
        quiet=(None,),
        refusal="verl_lite has no sandbox client; score code in reward.custom_reward_function.",
    ),
    # ---- algorithm
    # (rollout_is, rollout_is_threshold, rollout_rs, rollout_rs_threshold(_lower) are verl_lite's own keys)
    VerlKey(
        "algorithm.rollout_correction.rollout_token_veto_threshold",
        quiet=(None,),
        refusal="verl_lite has no veto; reject tokens with rollout_rs=token and rollout_rs_threshold_lower.",
    ),
    VerlKey(
        "algorithm.rollout_correction.rollout_is_batch_normalize",
        quiet=(False,),
        refusal="verl_lite does not renormalise the weights over the batch; leave it false.",
    ),
    VerlKey(
        "algorithm.rollout_correction.bypass_mode",
        quiet=(False,),
        refusal="verl_lite always computes old log-probs with the actor when a correction is on; leave it false.",
    ),
    VerlKey(
        "algorithm.rollout_correction.use_policy_gradient",
        quiet=(False,),
        refusal="choose the plain policy-gradient loss with actor_rollout_ref.actor.policy_loss=reinforce.",
    ),
    VerlKey(
        "algorithm.use_pf_ppo", quiet=(False,), refusal="verl_lite has no PF-PPO reweighting; leave it false."
    ),
    VerlKey("algorithm.pf_ppo", notice="not used (verl_lite has no PF-PPO)."),
    # ---- trainer
    VerlKey(
        "trainer.max_actor_ckpt_to_keep",
        ours=("trainer.max_ckpt_to_keep",),
        quiet=(None,),
        notice="runs as trainer.max_ckpt_to_keep, one count for the whole checkpoint (actor and critic).",
    ),
    VerlKey(
        "trainer.max_critic_ckpt_to_keep",
        ours=("trainer.max_ckpt_to_keep",),
        quiet=(None,),
        notice="runs as trainer.max_ckpt_to_keep, one count for the whole checkpoint (actor and critic).",
    ),
    VerlKey(
        "trainer.log_val_generations",
        quiet=(0,),
        notice="not used; trainer.validation_data_dir writes every validation generation as JSONL.",
    ),
    VerlKey(
        "trainer.device",
        quiet=("cuda",),
        notice="not used; verl_lite uses GPUs when Ray offers them, else CPU.",
    ),
    VerlKey(
        "trainer.default_hdfs_dir",
        quiet=(None,),
        refusal="verl_lite writes checkpoints to trainer.default_local_dir only; copy them from there.",
    ),
    VerlKey("trainer.del_local_ckpt_after_load", quiet=(False,), notice="not used; checkpoints are kept."),
    VerlKey("trainer.use_legacy_worker_impl"),
    VerlKey("trainer.ray_wait_register_center_timeout"),
    VerlKey("trainer.esi_redundant_time"),
    VerlKey("trainer.profile_steps", quiet=(None,), notice="not used; see bench/ for verl_lite's timings."),
    VerlKey("global_profiler", notice="not used; see bench/ for verl_lite's timings."),
    VerlKey("ray_init", ours=("ray_kwargs.ray_init",)),
)


def verl_key(key: str) -> VerlKey | None:
    """The entry of :data:`VERL_KEYS` that handles override key ``key`` (the most specific), or None."""
    found = [entry for entry in VERL_KEYS if entry.matches(key)]
    return max(found, key=lambda entry: len(entry.verl)) if found else None


def translate_overrides(overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """verl_lite's overrides for a verl-style override list, and one notice per key verl_lite treats differently.

    Overrides that are not verl keys pass unchanged. Raises ``ConfigError`` listing every refused value
    at once. Overrides a noticed value implies (``multi_turn.enable=true`` sets the default agent loop)
    go first, so the command line's own setting of those keys wins.
    """
    implied, out, notices, problems = [], [], [], []
    for override in overrides:
        match = _OVERRIDE.match(override)
        entry = verl_key(match["key"]) if match else None
        if entry is None:
            out.append(override)
            continue
        prefix, key, rest = match["prefix"], match["key"], match["rest"] or ""
        raw = rest[1:]
        value = parse_value(raw)
        if entry.values and not (isinstance(value, str) and value in entry.values):
            out.append(override)  # a verl_lite value of a key both share
            continue
        if rest and value in entry.quiet:
            continue  # asks for nothing verl_lite lacks
        if rest:
            if entry.refusal:
                problems.append(f"{key}={raw}: {entry.refusal}")
                continue
            if entry.notice:
                notices.append(f"{key}={raw}: {entry.notice}")
            implied += [f"{path}={wanted}" for path, wanted in entry.sets]
            raw = entry.values.get(value, raw)
        tail = key[len(entry.verl) :]
        out += [f"{prefix}{ours}{tail}" + (f"={raw}" if rest else "") for ours in entry.ours]
    if problems:
        raise ConfigError("invalid configuration:\n- " + "\n- ".join(problems))
    return implied + out, notices


def translated_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with its verl overrides translated (flags such as ``--config-name x`` pass unchanged).

    Prints the notices to stderr; on a refused value prints the reasons and exits with status 2, as a
    config that fails validation does.
    """
    flags, overrides = [], []
    args = list(argv[1:])
    while args:
        arg = args.pop(0)
        if arg.startswith("-"):
            flags.append(arg)
            if "=" not in arg and args and not args[0].startswith("-") and arg not in _BARE_FLAGS:
                flags.append(args.pop(0))  # the flag's value (--config-name ppo_trainer)
        else:
            overrides.append(arg)
    try:
        overrides, notices = translate_overrides(overrides)
    except ConfigError as err:
        print(f"verl_lite: {err}", file=sys.stderr)
        sys.exit(2)
    print_notices(notices)
    return [argv[0], *flags, *overrides]


def print_notices(notices: Sequence[str]) -> None:
    """One stderr line per notice, each starting ``verl_lite: ``."""
    for notice in notices:
        print(f"verl_lite: {notice}", file=sys.stderr)


def parse_value(raw: str) -> Any:
    """A Hydra override value as the Python value Hydra gives it (``1e-6`` a float, ``'a'`` a string)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_override(f"k={raw}").value()
    except Exception:  # not Hydra's grammar: Hydra will say so when it composes
        return raw
