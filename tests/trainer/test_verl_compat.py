"""verl's GSM8K GRPO command lines on verl_lite: every override works, passes with a notice, or is refused."""

import functools
import os

import pytest
import yaml
from omegaconf import OmegaConf

from tests.trainer.helpers import train
from verl_lite.trainer.load import CONFIG_DIR, compose_config, load_ppo_config
from verl_lite.trainer.validation import EMBEDDED_DATA, EMBEDDED_MODEL
from verl_lite.trainer.verl_compat import VERL_KEYS, drop_verl_keys

TRAIN = os.path.join(EMBEDDED_DATA, "train.parquet")
VAL = os.path.join(EMBEDDED_DATA, "val.parquet")

# The 42 overrides of verl's GSM8K GRPO examples (examples/grpo_trainer/run_qwen2-7b*.sh, plus the
# multi-turn/liger variants), with verl's values except files, model and lengths, which point at the
# embedded tiny model and task (its context is 512 tokens). Expected: works (an ordinary verl_lite key,
# the value lands in the typed config), notice (accepted, one line says what verl_lite does instead),
# refused (one sentence naming the key).
VERL_GSM8K_GRPO = [
    ("algorithm.adv_estimator=grpo", "works"),
    (f"data.train_files={TRAIN}", "works"),
    (f"data.val_files={VAL}", "works"),
    ("data.train_batch_size=1024", "works"),
    ("data.max_prompt_length=256", "works"),
    ("data.max_response_length=128", "works"),
    ("data.filter_overlong_prompts=True", "works"),
    ("data.truncation='error'", "works"),
    (f"actor_rollout_ref.model.path={EMBEDDED_MODEL}", "works"),
    ("actor_rollout_ref.actor.optim.lr=1e-6", "works"),
    ("actor_rollout_ref.model.use_remove_padding=True", "works"),
    ("actor_rollout_ref.actor.ppo_mini_batch_size=256", "works"),
    ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=40", "works"),
    ("actor_rollout_ref.actor.use_kl_loss=True", "works"),
    ("actor_rollout_ref.actor.kl_loss_coef=0.001", "works"),
    ("actor_rollout_ref.actor.kl_loss_type=low_var_kl", "works"),
    ("actor_rollout_ref.actor.entropy_coeff=0", "works"),
    ("actor_rollout_ref.model.enable_gradient_checkpointing=True", "works"),
    ("actor_rollout_ref.actor.fsdp_config.param_offload=False", "works"),
    ("actor_rollout_ref.actor.fsdp_config.optimizer_offload=False", "works"),
    ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=40", "works"),
    # verl's scripts use 2; verl_lite runs one engine per worker, so only 1 works
    ("actor_rollout_ref.rollout.tensor_model_parallel_size=2", "refused"),
    ("actor_rollout_ref.rollout.name=vllm", "works"),
    ("actor_rollout_ref.rollout.gpu_memory_utilization=0.6", "works"),
    ("actor_rollout_ref.rollout.n=5", "works"),
    ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=40", "works"),
    ("actor_rollout_ref.ref.fsdp_config.param_offload=True", "works"),
    ("algorithm.use_kl_in_reward=False", "works"),
    ("trainer.critic_warmup=0", "works"),
    ("trainer.logger=['console','wandb']", "works"),
    ("trainer.project_name=verl_grpo_example_gsm8k", "works"),
    ("trainer.experiment_name=qwen2_7b_function_rm", "works"),
    ("trainer.n_gpus_per_node=8", "works"),
    ("trainer.nnodes=1", "works"),
    ("trainer.save_freq=20", "works"),
    ("trainer.test_freq=5", "works"),
    ("trainer.total_epochs=15", "works"),
    ("actor_rollout_ref.model.use_liger=True", "notice"),
    ("actor_rollout_ref.model.use_fused_kernels=True", "notice"),
    ("data.return_raw_chat=True", "notice"),
    ("actor_rollout_ref.rollout.mode=async", "notice"),
    ("actor_rollout_ref.rollout.multi_turn.format=hermes", "works"),
]


def test_the_list_holds_verls_42_overrides_once_each():
    keys = [override.split("=")[0] for override, _ in VERL_GSM8K_GRPO]
    assert len(keys) == len(set(keys)) == 42


@pytest.mark.parametrize(
    "override,expected", VERL_GSM8K_GRPO, ids=[o.split("=")[0] for o, _ in VERL_GSM8K_GRPO]
)
def test_verl_override_works_notices_or_is_refused(override, expected, capsys):
    key = override.split("=")[0]
    # verl's batch geometry (1024 prompts a step), which verl's mini-batch size of 256 needs
    cfg = compose_config("ppo_trainer", ["data.train_batch_size=1024", override])
    if expected == "refused":
        with pytest.raises(ValueError) as err:
            load_ppo_config(cfg)
        assert key in str(err.value) and "Could not override" not in str(err.value)
        return
    config = load_ppo_config(cfg)
    notices = [line for line in capsys.readouterr().err.splitlines() if line.startswith("verl_lite: ")]
    if expected == "notice":
        assert len(notices) == 1 and notices[0].startswith(f"verl_lite: {key}=")
    else:
        assert notices == []
        typed = functools.reduce(getattr, key.split("."), config)
        assert typed == OmegaConf.select(cfg, key)


def test_verl_gsm8k_command_line_loads_with_one_notice_per_unused_key(capsys):
    overrides = [override for override, expected in VERL_GSM8K_GRPO if expected != "refused"]
    config = load_ppo_config(compose_config("ppo_trainer", overrides))
    notices = capsys.readouterr().err.splitlines()
    assert len(notices) == sum(expected == "notice" for _, expected in VERL_GSM8K_GRPO)
    assert config.actor_rollout_ref.ref.fsdp_config.param_offload is True


def test_verls_rollout_modes_run_as_hybrid_and_multi_turn_enable_picks_the_tool_agent(capsys):
    cfg = compose_config(
        "ppo_trainer",
        ["actor_rollout_ref.rollout.mode=async", "actor_rollout_ref.rollout.multi_turn.enable=true"],
    )
    config = load_ppo_config(cfg)
    assert config.actor_rollout_ref.rollout.mode == "hybrid"
    assert config.actor_rollout_ref.rollout.agent.default_agent_loop == "tool_agent"
    notices = capsys.readouterr().err
    assert "actor_rollout_ref.rollout.mode=async (verl) runs as hybrid" in notices
    assert "actor_rollout_ref.rollout.multi_turn.enable=True" in notices


def test_a_refused_verl_value_names_the_key_and_what_to_use():
    cfg = compose_config(
        "ppo_trainer",
        ["actor_rollout_ref.model.use_liger=true", "actor_rollout_ref.rollout.multi_turn.enable=maybe"],
    )
    with pytest.raises(ValueError) as err:
        load_ppo_config(cfg)
    message = str(err.value)
    assert "actor_rollout_ref.rollout.multi_turn.enable='maybe'" in message and "is not a boolean" in message


def test_verl_compat_yaml_declares_exactly_the_compat_keys_with_quiet_defaults():
    with open(os.path.join(CONFIG_DIR, "verl_compat.yaml")) as f:
        tree = yaml.safe_load(f)

    def leaves(node, prefix=""):
        for k, v in node.items():
            yield from leaves(v, f"{prefix}{k}.") if isinstance(v, dict) else [(f"{prefix}{k}", v)]

    declared = dict(leaves(tree))
    assert set(declared) == {key.path for key in VERL_KEYS}
    assert all(declared[key.path] in key.quiet for key in VERL_KEYS)
    cfg, notices = drop_verl_keys(compose_config("ppo_trainer", []))
    assert notices == [] and "enable" not in cfg.actor_rollout_ref.rollout.multi_turn


def test_grpo_trains_with_verls_offload_and_log_prob_batch_keys(tmp_path):
    history = train(
        tmp_path,
        "trainer.total_training_steps=2",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.optim.lr=1e-4",  # large enough for a visible KL after one update
        "actor_rollout_ref.actor.old_log_prob=recompute",  # so the old-log-prob forward runs
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
        "actor_rollout_ref.ref.fsdp_config.param_offload=true",
        # 16 trajectories per step: micro-batches of 5 and 3 leave a remainder
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=5",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=3",
        "actor_rollout_ref.model.use_remove_padding=true",
        "actor_rollout_ref.rollout.mode=async",
    )
    assert [h["step"] for h in history] == [1, 2]
    for h in history:
        assert h["actor/grad_norm"] > 0 and h["actor/kl_loss"] >= 0
    # step 1 starts from the reference weights (KL 0); after one update the actor has moved
    assert history[1]["actor/kl_loss"] > 0
