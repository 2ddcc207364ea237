"""verl's example command lines on verl_lite: each override works, passes with a notice, or is refused.

The lists are the overrides of verl's example scripts, family by family (GSM8K PPO with a critic, GRPO,
DAPO, REINFORCE++, RLOO, ReMax, the multi-turn tool example), with verl's values except the files, the
model and the lengths, which point at the embedded tiny model and task (its context is 512 tokens).
Expected: works (verl's meaning; the value lands in the typed config, under verl_lite's path where that
differs), notice (accepted, one line says what verl_lite does instead), refused (one sentence naming the
key, before Ray starts). Config only: nothing here starts Ray.
"""

import functools
import os
from collections import Counter
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verl_lite.trainer.load import compose_config, load_ppo_config
from verl_lite.trainer.validation import EMBEDDED_DATA, EMBEDDED_MODEL
from verl_lite.trainer.verl_compat import parse_value, verl_key

TRAIN = os.path.join(EMBEDDED_DATA, "train.parquet")
VAL = os.path.join(EMBEDDED_DATA, "val.parquet")
REWARD = str(Path(__file__).resolve().parents[2] / "examples" / "custom_reward.py")
CONFIGS = Path(__file__).resolve().parents[2] / "verl_lite" / "configs"
TOOLS = str(CONFIGS / "tools" / "calculator.yaml")
INTERACTIONS = str(CONFIGS / "interactions" / "gsm8k.yaml")
ARR = "actor_rollout_ref"

# Shared by every family: files, model and lengths (changed), and verl's trainer lines.
COMMON = [
    (f"data.train_files={TRAIN}", "works"),
    (f"data.val_files={VAL}", "works"),
    ("data.max_prompt_length=256", "works"),
    ("data.max_response_length=128", "works"),
    (f"{ARR}.model.path={EMBEDDED_MODEL}", "works"),
    ("trainer.logger=['console','wandb']", "works"),
    ("trainer.project_name=verl_example", "works"),
    ("trainer.experiment_name=verl_example_run", "works"),
    ("trainer.n_gpus_per_node=8", "works"),
    ("trainer.nnodes=1", "works"),
]

FAMILIES = {
    # examples/ppo_trainer (GSM8K, a critic, a reward function file, sequence balancing)
    "ppo_gsm8k_critic": [
        ("algorithm.adv_estimator=gae", "works"),
        ("data.train_batch_size=1024", "works"),
        ("data.filter_overlong_prompts=True", "works"),
        ("data.truncation='error'", "works"),
        ("data.dataloader_num_workers=8", "notice"),
        (f"{ARR}.actor.strategy=fsdp", "works"),
        (f"{ARR}.actor.optim.lr=1e-6", "works"),
        (f"{ARR}.actor.optim.lr_warmup_steps_ratio=0.1", "works"),
        (f"{ARR}.actor.optim.warmup_style=cosine", "works"),
        (f"{ARR}.model.use_remove_padding=True", "works"),
        (f"{ARR}.actor.ppo_mini_batch_size=256", "works"),
        (f"{ARR}.actor.ppo_micro_batch_size_per_gpu=16", "works"),
        (f"{ARR}.actor.use_dynamic_bsz=True", "works"),
        (f"{ARR}.actor.ppo_max_token_len_per_gpu=24000", "works"),
        (f"{ARR}.actor.fsdp_config.param_offload=False", "works"),
        (f"{ARR}.actor.fsdp_config.optimizer_offload=False", "works"),
        (f"{ARR}.actor.use_kl_loss=False", "works"),
        (f"{ARR}.model.enable_gradient_checkpointing=True", "works"),
        (f"{ARR}.rollout.log_prob_micro_batch_size_per_gpu=32", "works"),
        (f"{ARR}.rollout.tensor_model_parallel_size=4", "refused"),
        (f"{ARR}.rollout.name=vllm", "works"),
        (f"{ARR}.rollout.gpu_memory_utilization=0.5", "works"),
        ("critic.strategy=fsdp", "works"),
        ("critic.optim.lr=1e-5", "works"),
        ("critic.optim.lr_warmup_steps_ratio=0.05", "works"),
        ("critic.model.use_remove_padding=True", "works"),
        (f"critic.model.path={EMBEDDED_MODEL}", "works"),
        ("critic.model.enable_gradient_checkpointing=True", "works"),
        ("critic.ppo_micro_batch_size_per_gpu=32", "works"),
        ("critic.ppo_max_token_len_per_gpu=98304", "works"),
        ("critic.model.fsdp_config.param_offload=False", "works"),
        ("critic.model.fsdp_config.optimizer_offload=True", "notice"),
        (f"custom_reward_function.path={REWARD}", "works"),
        ("custom_reward_function.name=compute_score", "works"),
        ("reward_model.reward_manager=naive", "works"),
        ("reward_model.micro_batch_size_per_gpu=32", "works"),
        ("reward_model.model.fsdp_config.param_offload=True", "notice"),
        ("algorithm.use_kl_in_reward=False", "works"),
        ("trainer.critic_warmup=0", "works"),
        ("trainer.save_freq=20", "works"),
        ("trainer.test_freq=10", "works"),
        ("trainer.total_epochs=15", "works"),
        ("trainer.max_actor_ckpt_to_keep=2", "notice"),
        ("trainer.max_critic_ckpt_to_keep=2", "notice"),
    ],
    # examples/grpo_trainer/run_qwen2-7b*.sh, plus the multi-turn and Liger variants
    "grpo_gsm8k": [
        ("algorithm.adv_estimator=grpo", "works"),
        ("data.train_batch_size=1024", "works"),
        ("data.filter_overlong_prompts=True", "works"),
        ("data.truncation='error'", "works"),
        (f"{ARR}.actor.optim.lr=1e-6", "works"),
        (f"{ARR}.model.use_remove_padding=True", "works"),
        (f"{ARR}.actor.ppo_mini_batch_size=256", "works"),
        (f"{ARR}.actor.ppo_micro_batch_size_per_gpu=40", "works"),
        (f"{ARR}.actor.use_kl_loss=True", "works"),
        (f"{ARR}.actor.kl_loss_coef=0.001", "works"),
        (f"{ARR}.actor.kl_loss_type=low_var_kl", "works"),
        (f"{ARR}.actor.entropy_coeff=0", "works"),
        (f"{ARR}.model.enable_gradient_checkpointing=True", "works"),
        (f"{ARR}.actor.fsdp_config.param_offload=False", "works"),
        (f"{ARR}.actor.fsdp_config.optimizer_offload=False", "works"),
        (f"{ARR}.rollout.log_prob_micro_batch_size_per_gpu=40", "works"),
        (f"{ARR}.rollout.tensor_model_parallel_size=2", "refused"),
        (f"{ARR}.rollout.name=vllm", "works"),
        (f"{ARR}.rollout.gpu_memory_utilization=0.6", "works"),
        (f"{ARR}.rollout.n=5", "works"),
        (f"{ARR}.ref.log_prob_micro_batch_size_per_gpu=40", "works"),
        (f"{ARR}.ref.fsdp_config.param_offload=True", "works"),
        ("algorithm.use_kl_in_reward=False", "works"),
        ("trainer.critic_warmup=0", "works"),
        ("trainer.save_freq=20", "works"),
        ("trainer.test_freq=5", "works"),
        ("trainer.total_epochs=15", "works"),
        (f"{ARR}.model.use_liger=True", "notice"),
        (f"{ARR}.model.use_fused_kernels=True", "notice"),
        ("data.return_raw_chat=True", "notice"),
        (f"{ARR}.rollout.mode=async", "notice"),
        (f"{ARR}.rollout.multi_turn.format=hermes", "works"),
    ],
    # recipe/dapo (clip-higher, dynamic sampling, overlong penalty, token-mean loss)
    "dapo": [
        ("algorithm.adv_estimator=grpo", "works"),
        ("data.prompt_key=prompt", "works"),
        ("data.truncation='left'", "works"),
        ("data.train_batch_size=512", "works"),
        ("data.gen_batch_size=1536", "notice"),
        (f"{ARR}.rollout.n=16", "works"),
        ("algorithm.use_kl_in_reward=False", "works"),
        ("algorithm.kl_ctrl.kl_coef=0.0", "works"),
        (f"{ARR}.actor.use_kl_loss=False", "works"),
        (f"{ARR}.actor.kl_loss_coef=0.0", "works"),
        (f"{ARR}.actor.clip_ratio_low=0.2", "works"),
        (f"{ARR}.actor.clip_ratio_high=0.28", "works"),
        (f"{ARR}.actor.clip_ratio_c=10.0", "works"),
        ("algorithm.filter_groups.enable=True", "works"),
        ("algorithm.filter_groups.max_num_gen_batches=10", "works"),
        ("algorithm.filter_groups.metric=acc", "works"),
        (f"{ARR}.actor.use_dynamic_bsz=True", "works"),
        (f"{ARR}.ref.log_prob_use_dynamic_bsz=True", "works"),
        (f"{ARR}.rollout.log_prob_use_dynamic_bsz=True", "works"),
        (f"{ARR}.actor.ppo_max_token_len_per_gpu=2048", "works"),
        (f"{ARR}.ref.log_prob_max_token_len_per_gpu=2048", "works"),
        (f"{ARR}.rollout.log_prob_max_token_len_per_gpu=2048", "works"),
        (f"{ARR}.actor.optim.lr=1e-6", "works"),
        (f"{ARR}.actor.optim.lr_warmup_steps=10", "works"),
        (f"{ARR}.actor.optim.weight_decay=0.1", "works"),
        (f"{ARR}.actor.ppo_mini_batch_size=32", "works"),
        (f"{ARR}.actor.fsdp_config.param_offload=True", "works"),
        (f"{ARR}.actor.fsdp_config.optimizer_offload=True", "works"),
        (f"{ARR}.actor.entropy_coeff=0", "works"),
        (f"{ARR}.actor.grad_clip=1.0", "works"),
        (f"{ARR}.actor.loss_agg_mode=token-mean", "works"),
        (f"{ARR}.actor.ulysses_sequence_parallel_size=8", "refused"),
        (f"{ARR}.rollout.gpu_memory_utilization=0.80", "works"),
        (f"{ARR}.rollout.tensor_model_parallel_size=4", "refused"),
        (f"{ARR}.rollout.enable_chunked_prefill=True", "notice"),
        (f"{ARR}.rollout.max_num_batched_tokens=2048", "notice"),
        (f"{ARR}.rollout.temperature=1.0", "works"),
        (f"{ARR}.rollout.top_p=1.0", "works"),
        (f"{ARR}.rollout.top_k=-1", "works"),
        (f"{ARR}.rollout.val_kwargs.temperature=1.0", "works"),
        (f"{ARR}.rollout.val_kwargs.top_p=0.7", "works"),
        (f"{ARR}.rollout.val_kwargs.top_k=-1", "works"),
        (f"{ARR}.rollout.val_kwargs.do_sample=True", "works"),
        (f"{ARR}.rollout.val_kwargs.n=1", "works"),
        (f"{ARR}.ref.fsdp_config.param_offload=True", "works"),
        (f"{ARR}.ref.ulysses_sequence_parallel_size=8", "refused"),
        (f"{ARR}.actor.fsdp_config.fsdp_size=-1", "works"),
        ("reward_model.reward_manager=dapo", "works"),
        ("reward_model.overlong_buffer.enable=True", "works"),
        ("reward_model.overlong_buffer.len=64", "works"),
        ("reward_model.overlong_buffer.penalty_factor=1.0", "works"),
        ("trainer.val_before_train=True", "works"),
        ("trainer.test_freq=5", "works"),
        ("trainer.save_freq=5", "works"),
        ("trainer.total_epochs=1", "works"),
        ("trainer.resume_mode=auto", "works"),
    ],
    # examples/reinforce_plus_plus_trainer
    "reinforce_plus_plus": [
        ("algorithm.adv_estimator=reinforce_plus_plus", "works"),
        ("data.train_batch_size=1024", "works"),
        (f"{ARR}.actor.optim.lr=3e-7", "works"),
        (f"{ARR}.model.use_remove_padding=True", "works"),
        (f"{ARR}.actor.ppo_mini_batch_size=1024", "works"),
        (f"{ARR}.actor.ppo_micro_batch_size_per_gpu=16", "works"),
        (f"{ARR}.actor.use_kl_loss=True", "works"),
        (f"{ARR}.actor.kl_loss_coef=0.001", "works"),
        (f"{ARR}.actor.kl_loss_type=mse", "works"),
        (f"{ARR}.actor.entropy_coeff=0", "works"),
        (f"{ARR}.model.enable_gradient_checkpointing=True", "works"),
        (f"{ARR}.actor.fsdp_config.param_offload=False", "works"),
        (f"{ARR}.actor.fsdp_config.optimizer_offload=False", "works"),
        (f"{ARR}.rollout.log_prob_micro_batch_size_per_gpu=16", "works"),
        (f"{ARR}.rollout.tensor_model_parallel_size=2", "refused"),
        (f"{ARR}.rollout.name=vllm", "works"),
        (f"{ARR}.rollout.gpu_memory_utilization=0.6", "works"),
        (f"{ARR}.rollout.n=8", "works"),
        (f"{ARR}.ref.log_prob_micro_batch_size_per_gpu=16", "works"),
        (f"{ARR}.ref.fsdp_config.param_offload=True", "works"),
        ("algorithm.use_kl_in_reward=False", "works"),
        ("trainer.critic_warmup=0", "works"),
        ("trainer.save_freq=-1", "works"),
        ("trainer.test_freq=5", "works"),
        ("trainer.total_epochs=15", "works"),
    ],
    # examples/rloo_trainer (KL in the reward, no KL loss)
    "rloo": [
        ("algorithm.adv_estimator=rloo", "works"),
        ("data.train_batch_size=1024", "works"),
        (f"{ARR}.actor.optim.lr=1e-6", "works"),
        (f"{ARR}.model.use_remove_padding=True", "works"),
        (f"{ARR}.actor.ppo_mini_batch_size=256", "works"),
        (f"{ARR}.actor.ppo_micro_batch_size_per_gpu=80", "works"),
        (f"{ARR}.actor.use_kl_loss=False", "works"),
        (f"{ARR}.model.enable_gradient_checkpointing=True", "works"),
        (f"{ARR}.actor.fsdp_config.param_offload=False", "works"),
        (f"{ARR}.actor.fsdp_config.optimizer_offload=False", "works"),
        (f"{ARR}.rollout.log_prob_micro_batch_size_per_gpu=160", "works"),
        (f"{ARR}.rollout.tensor_model_parallel_size=2", "refused"),
        (f"{ARR}.rollout.name=vllm", "works"),
        (f"{ARR}.rollout.gpu_memory_utilization=0.6", "works"),
        (f"{ARR}.rollout.n=5", "works"),
        (f"{ARR}.ref.log_prob_micro_batch_size_per_gpu=160", "works"),
        (f"{ARR}.ref.fsdp_config.param_offload=True", "works"),
        ("algorithm.use_kl_in_reward=True", "works"),
        ("algorithm.kl_penalty=kl", "works"),
        ("algorithm.kl_ctrl.kl_coef=0.001", "works"),
        ("trainer.critic_warmup=0", "works"),
        ("trainer.save_freq=-1", "works"),
        ("trainer.test_freq=5", "works"),
        ("trainer.total_epochs=15", "works"),
    ],
    # examples/remax_trainer (sequence balancing, KL in the reward)
    "remax": [
        ("algorithm.adv_estimator=remax", "works"),
        ("data.train_batch_size=512", "works"),
        (f"{ARR}.actor.optim.lr=1e-6", "works"),
        (f"{ARR}.model.use_remove_padding=True", "works"),
        (f"{ARR}.actor.ppo_mini_batch_size=128", "works"),
        (f"{ARR}.actor.use_dynamic_bsz=True", "works"),
        (f"{ARR}.actor.ppo_max_token_len_per_gpu=30000", "works"),
        (f"{ARR}.actor.use_kl_loss=False", "works"),
        (f"{ARR}.model.enable_gradient_checkpointing=True", "works"),
        (f"{ARR}.actor.fsdp_config.param_offload=False", "works"),
        (f"{ARR}.actor.fsdp_config.optimizer_offload=False", "works"),
        (f"{ARR}.rollout.tensor_model_parallel_size=2", "refused"),
        (f"{ARR}.rollout.name=vllm", "works"),
        (f"{ARR}.rollout.gpu_memory_utilization=0.8", "works"),
        (f"{ARR}.rollout.n=4", "works"),
        ("algorithm.use_kl_in_reward=True", "works"),
        ("algorithm.kl_penalty=kl", "works"),
        ("algorithm.kl_ctrl.kl_coef=0.001", "works"),
        ("trainer.critic_warmup=0", "works"),
        ("trainer.save_freq=-1", "works"),
        ("trainer.test_freq=5", "works"),
        ("trainer.total_epochs=5", "works"),
    ],
    # examples/sglang_multiturn (GSM8K with a tool, and the interaction variant; its yaml's multi_turn
    # section as overrides)
    "multi_turn_tool": [
        ("algorithm.adv_estimator=grpo", "works"),
        ("data.train_batch_size=256", "works"),
        ("data.filter_overlong_prompts=True", "works"),
        ("data.truncation='error'", "works"),
        ("data.return_raw_chat=True", "notice"),
        (f"{ARR}.actor.optim.lr=1e-6", "works"),
        (f"{ARR}.model.use_remove_padding=True", "works"),
        (f"{ARR}.actor.ppo_mini_batch_size=256", "works"),
        (f"{ARR}.actor.ppo_micro_batch_size_per_gpu=32", "works"),
        (f"{ARR}.actor.use_kl_loss=True", "works"),
        (f"{ARR}.actor.kl_loss_coef=0.001", "works"),
        (f"{ARR}.actor.kl_loss_type=low_var_kl", "works"),
        (f"{ARR}.actor.entropy_coeff=0", "works"),
        (f"{ARR}.model.enable_gradient_checkpointing=True", "works"),
        (f"{ARR}.actor.fsdp_config.param_offload=False", "works"),
        (f"{ARR}.actor.fsdp_config.optimizer_offload=False", "works"),
        (f"{ARR}.rollout.log_prob_micro_batch_size_per_gpu=32", "works"),
        (f"{ARR}.rollout.tensor_model_parallel_size=2", "refused"),
        (f"{ARR}.rollout.name=sglang", "refused"),
        (f"{ARR}.rollout.gpu_memory_utilization=0.5", "works"),
        (f"{ARR}.rollout.n=16", "works"),
        (f"{ARR}.rollout.mode=async", "notice"),
        (f"{ARR}.rollout.multi_turn.enable=True", "notice"),
        (f"{ARR}.rollout.multi_turn.max_assistant_turns=5", "works"),
        (f"{ARR}.rollout.multi_turn.tool_config_path={TOOLS}", "works"),
        (f"{ARR}.rollout.multi_turn.interaction_config_path={INTERACTIONS}", "works"),
        (f"{ARR}.rollout.multi_turn.max_user_turns=5", "works"),
        (f"{ARR}.rollout.multi_turn.use_inference_chat_template=False", "notice"),
        (f"{ARR}.rollout.multi_turn.tokenization_sanity_check_mode=strict", "notice"),
        (f"{ARR}.rollout.multi_stage_wake_up=False", "works"),
        (f"{ARR}.rollout.over_sample_rate=0", "works"),
        (f"{ARR}.ref.log_prob_micro_batch_size_per_gpu=32", "works"),
        (f"{ARR}.ref.fsdp_config.param_offload=True", "works"),
        ("algorithm.use_kl_in_reward=False", "works"),
        ("trainer.critic_warmup=0", "works"),
        ("trainer.save_freq=-1", "works"),
        ("trainer.test_freq=20", "works"),
        ("trainer.total_epochs=15", "works"),
    ],
}


def _lines(family: str) -> list[tuple[str, str]]:
    return [*COMMON, *FAMILIES[family]]


def _notices(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("verl_lite: ")]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_lists_verls_overrides_once(family):
    keys = [override.split("=")[0] for override, _ in _lines(family)]
    assert [k for k, n in Counter(keys).items() if n > 1] == []


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_loads_with_verls_values_and_one_notice_per_noticed_key(family, capsys):
    lines = [(o, e) for o, e in _lines(family) if e != "refused"]
    cfg = compose_config("ppo_trainer", [o for o, _ in lines])
    config = load_ppo_config(cfg)
    noticed = sorted(line.split("=")[0].removeprefix("verl_lite: ") for line in _notices(capsys))
    assert noticed == sorted(o.split("=")[0] for o, e in lines if e == "notice")
    wrong = []
    for override, _ in (line for line in lines if line[1] == "works"):
        key, raw = override.split("=", 1)
        entry = verl_key(key)
        # verl_lite's path of the key (none when the verl value asks for nothing verl_lite lacks)
        for path in [key] if entry is None else [ours + key[len(entry.verl) :] for ours in entry.ours]:
            typed = functools.reduce(getattr, path.split("."), config)
            if typed != parse_value(raw) or OmegaConf.select(cfg, path) != typed:
                wrong.append(f"{override} -> {path}={typed!r}")
    assert wrong == []


REFUSED = sorted({o for rows in FAMILIES.values() for o, e in rows if e == "refused"})


@pytest.mark.parametrize("override", REFUSED)
def test_refused_verl_value_is_one_sentence_naming_the_key_before_ray(override):
    key = override.split("=")[0]
    with pytest.raises(ValueError) as err:
        load_ppo_config(compose_config("ppo_trainer", [override]))
    problems = [line for line in str(err.value).splitlines() if key in line]
    assert len(problems) == 1 and "Could not override" not in str(err.value)
    assert problems[0].rstrip().endswith(".")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_whole_family_reports_its_refusals_in_at_most_two_rounds(family):
    # verl spellings are refused while the command line is read, values of verl_lite keys by validation
    lines, named = [o for o, _ in _lines(family)], []
    for _ in range(2):
        with pytest.raises(ValueError) as err:
            load_ppo_config(compose_config("ppo_trainer", lines))
        named += [o for o in lines if f"{o.split('=')[0]}=" in str(err.value)]
        lines = [o for o in lines if o not in named]
        if all(e != "refused" or o not in lines for o, e in _lines(family)):
            break
    assert sorted(named) == sorted(o for o, e in _lines(family) if e == "refused")


DOC = Path(__file__).resolve().parents[2] / "docs" / "migrating_from_verl.md"
# The family column of the guide's table, by the name used here.
DOC_ROWS = {
    "ppo_gsm8k_critic": "GSM8K PPO with a critic",
    "grpo_gsm8k": "GSM8K GRPO",
    "dapo": "DAPO",
    "reinforce_plus_plus": "REINFORCE++",
    "rloo": "RLOO",
    "remax": "ReMax",
    "multi_turn_tool": "GSM8K multi-turn tool",
}


def test_the_migration_guides_table_counts_these_lists():
    table = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        for family, label in DOC_ROWS.items():
            if line.startswith("|") and cells[0].startswith(label + " ("):
                table[family] = tuple(int(c) for c in cells[1:5])
    for family in FAMILIES:
        counts = Counter(e for _, e in _lines(family))
        assert table[family] == (len(_lines(family)), counts["works"], counts["notice"], counts["refused"])
