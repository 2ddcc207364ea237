"""Translating verl's spellings on the command line (verl_compat), and training from them.

verl's example scripts, family by family, are in test_verl_examples.py."""

from pathlib import Path

import pytest

from tests.trainer.helpers import FAST, dumped_generations, joining, train
from tests.trainer.test_verl_examples import COMMON, FAMILIES
from verl_lite.trainer.load import compose_config, load_ppo_config
from verl_lite.trainer.validation import ConfigError
from verl_lite.trainer.verl_compat import VERL_KEYS, translate_overrides, translated_argv

REWARD = str(Path(__file__).resolve().parents[2] / "examples" / "custom_reward.py")
ARR = "actor_rollout_ref"


def test_verl_spellings_reach_verl_lites_keys_and_others_pass_unchanged():
    overrides, notices = translate_overrides(
        [
            "critic.optim.lr=1e-5",
            "critic.optim.lr_warmup_steps_ratio=0.1",
            "+reward_model.reward_kwargs.bonus=1",
            "~custom_reward_function.name",
            f"{ARR}.actor.clip_ratio=0.25",
            "trainer.total_epochs=3",
        ]
    )
    assert overrides == [
        "critic.critic.optim.lr=1e-5",
        "critic.critic.optim.warmup_steps_ratio=0.1",
        "+reward.reward_kwargs.bonus=1",
        "~reward.custom_reward_function.name",
        f"{ARR}.actor.clip_ratio_low=0.25",
        f"{ARR}.actor.clip_ratio_high=0.25",
        "trainer.total_epochs=3",
    ]
    assert notices == []


def test_a_noticed_value_goes_first_so_the_command_lines_own_setting_wins():
    overrides, notices = translate_overrides(
        [f"{ARR}.rollout.agent.default_agent_loop=my_loop", f"{ARR}.rollout.multi_turn.enable=true"]
    )
    assert overrides == [
        f"{ARR}.rollout.agent.default_agent_loop=tool_agent",
        f"{ARR}.rollout.agent.default_agent_loop=my_loop",
    ]
    assert len(notices) == 1 and notices[0].startswith(f"{ARR}.rollout.multi_turn.enable=true: ")


def test_quiet_verl_values_are_dropped_and_verl_lite_values_of_shared_keys_pass():
    overrides, notices = translate_overrides(
        [
            f"{ARR}.actor.strategy=fsdp2",
            f"{ARR}.model.use_liger=False",
            f"{ARR}.rollout.mode=standalone",
            "algorithm.rollout_correction.bypass_mode=false",
        ]
    )
    assert overrides == [f"{ARR}.rollout.mode=standalone"] and notices == []


def test_older_tis_cap_runs_as_token_level_importance_sampling(capsys):
    config = load_ppo_config(compose_config("ppo_trainer", [f"{ARR}.actor.tis_imp_ratio_cap=3.0"]))
    assert config.algorithm.rollout_correction.rollout_is == "token"
    assert config.algorithm.rollout_correction.rollout_is_threshold == 3.0
    assert "tis_imp_ratio_cap=3.0: " in capsys.readouterr().err


def test_refusals_name_each_key_its_value_and_the_verl_lite_way_at_once():
    with pytest.raises(ConfigError) as err:
        translate_overrides(
            [
                f"{ARR}.actor.ulysses_sequence_parallel_size=4",
                "critic.strategy=megatron",
                "data.reward_fn_key=source",
            ]
        )
    lines = str(err.value).splitlines()[1:]
    assert lines == [
        f"- {ARR}.actor.ulysses_sequence_parallel_size=4: verl_lite has no sequence parallelism; use 1 "
        "(use_dynamic_bsz bounds the tokens per micro-batch).",
        "- critic.strategy=megatron: is the training engine; verl_lite's is critic.engine.name=fsdp (FSDP2), "
        "set once for the critic.",
        "- data.reward_fn_key=source: verl_lite picks the scorer by the data_source column "
        "(data.default_data_source for rows without one).",
    ]


def test_main_ppo_command_line_is_translated_and_a_refusal_exits_2(capsys):
    argv = ["main_ppo.py", "--config-name", "ppo_trainer", "critic.optim.lr=1e-5", "data.use_shm=true"]
    assert translated_argv(argv) == [
        "main_ppo.py",
        "--config-name",
        "ppo_trainer",
        "critic.critic.optim.lr=1e-5",
    ]
    assert "verl_lite: data.use_shm=true: not used" in capsys.readouterr().err
    # a flag that takes no value leaves the next argument an override
    assert translated_argv(["main_ppo.py", "--resolve", "critic.optim.lr=1"]) == [
        "main_ppo.py",
        "--resolve",
        "critic.critic.optim.lr=1",
    ]
    with pytest.raises(SystemExit) as stop:
        translated_argv(["main_ppo.py", "reward_model.sandbox_fusion.url=http://x"])
    assert stop.value.code == 2
    assert (
        "reward_model.sandbox_fusion.url=http://x: verl_lite has no sandbox client" in capsys.readouterr().err
    )


def test_every_verl_key_is_handled_one_way():
    # a verl key is renamed, dropped or refused by exactly one (the most specific) entry
    paths = [entry.verl for entry in VERL_KEYS]
    assert len(paths) == len(set(paths))
    for entry in VERL_KEYS:
        assert not (entry.refusal and entry.ours), entry.verl
        assert not entry.refusal or entry.refusal.endswith("."), entry.verl
        assert not entry.notice or entry.notice.endswith(")") or entry.notice.endswith("."), entry.verl


def test_ppo_trains_from_verls_critic_reward_warmup_and_correction_spellings(tmp_path, cluster):
    history = train(
        tmp_path,
        *joining(cluster),
        "algorithm.adv_estimator=gae",
        "trainer.total_training_steps=2",
        f"{ARR}.actor.strategy=fsdp",
        f"{ARR}.actor.optim.lr=1e-5",
        f"{ARR}.actor.optim.lr_warmup_steps=2",
        "critic.strategy=fsdp",
        "critic.optim.lr=3e-4",
        "critic.optim.lr_warmup_steps_ratio=1.0",
        "critic.ppo_micro_batch_size_per_gpu=5",
        "critic.forward_micro_batch_size_per_gpu=3",
        "critic.model.enable_gradient_checkpointing=true",
        "data.dataloader_num_workers=8",
        f"custom_reward_function.path={REWARD}",
        "custom_reward_function.name=compute_score",
        "+reward_model.reward_kwargs.length_bonus=0.25",
        "reward_model.reward_manager=dapo",
        "reward_model.overlong_buffer.enable=true",
        "reward_model.overlong_buffer.len=20",
        "reward_model.overlong_buffer.penalty_factor=0.5",
        "algorithm.rollout_correction.rollout_is=token",
        "algorithm.rollout_correction.rollout_is_threshold=1.5",
        "trainer.save_freq=1",
        "trainer.max_actor_ckpt_to_keep=1",
    )
    assert [h["step"] for h in history] == [1, 2]
    # two warmup steps: half the peak learning rate on the first update, all of it on the second
    assert [h["actor/lr"] for h in history] == pytest.approx([5e-6, 1e-5])
    assert [h["critic/lr"] for h in history] == pytest.approx([1.5e-4, 3e-4])
    assert all(h["critic/vf_loss"] > 0 for h in history)
    # the custom function's own metric and the overlong penalty of the dapo manager reach the step's metrics
    assert all("reward_extra/short/mean" in h and "reward_extra/overlong_reward/mean" in h for h in history)
    assert all(0.0 < h["off_policy/is_weight/max"] <= 1.5 for h in history)
    checkpoints = sorted(p.name for p in (tmp_path / "grpo_tiny" / "checkpoints").glob("global_step_*"))
    assert checkpoints == ["global_step_2"]


def test_grpo_trains_with_verls_offload_and_log_prob_batch_keys(tmp_path, cluster):
    history = train(
        tmp_path,
        *joining(cluster),
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


# What a verl example family's command line changes to run 2 steps on 2 CPU cores: the hf rollout on
# one CPU process, FAST's batch sizes and lengths (tests/trainer/helpers.py) again after verl's, no
# validation or checkpoint, jsonl logging.
ON_CPU = [
    *(o for o in FAST if not o.startswith("ray_kwargs.")),
    f"{ARR}.rollout.name=hf",
    "trainer.n_gpus_per_node=1",
    "trainer.total_training_steps=2",
    "trainer.save_freq=-1",
    "data.val_files=null",
    "reward_model.overlong_buffer.len=8",  # verl's 64 of 128 response tokens, scaled to FAST's 24
]


def dapo_trained_only_groups_with_mixed_answers(history: list[dict], dumps: dict[int, list[dict]]) -> None:
    """Dynamic sampling: every group trained on has right and wrong answers (the others were evicted
    and refilled); the dapo reward manager's overlong penalty is in the score."""
    for step, rows in dumps.items():
        accs = {}
        for row in rows:
            accs.setdefault(row["uid"], set()).add(row["acc"])
        assert len(accs) == 4 and all(values == {0.0, 1.0} for values in accs.values()), step
    # the penalty starts past max_response_length - overlong_buffer.len = 24 - 8 = 16 tokens
    for h in history:
        penalised = h["response_length/max"] > 16
        assert (h["reward_extra/overlong_reward/mean"] < 0) == penalised
        assert h["reward_extra/overlong_reward/mean"] <= 0


def remax_trained_against_the_greedy_baseline(history: list[dict], dumps: dict[int, list[dict]]) -> None:
    """ReMax: a greedy answer per prompt scored as the baseline; verl's KL-in-reward coefficient."""
    for h in history:
        assert 0 <= h["critic/remax_baseline/min"] <= h["critic/remax_baseline/max"] <= 1
        assert h["actor/reward_kl_penalty_coeff"] == 0.001


FAMILY_CHECKS = {
    "dapo": dapo_trained_only_groups_with_mixed_answers,
    "remax": remax_trained_against_the_greedy_baseline,
}


@pytest.mark.parametrize("family", sorted(FAMILY_CHECKS))
def test_verl_example_family_with_its_own_trainer_path_trains_two_steps(family, tmp_path, cluster):
    # The families whose step differs from GRPO's: DAPO (dynamic sampling refills zero-variance groups,
    # the dapo reward manager's overlong penalty, clip-higher) and ReMax (a greedy baseline generation
    # per prompt, KL in the reward). REINFORCE++ and RLOO differ only in the estimator, which other
    # main_ppo tests train (tests/test_everything_advertised_runs.py).
    verl_lines = [o for o, e in [*COMMON, *FAMILIES[family]] if e != "refused"]
    dumps = tmp_path / "dumps"
    history = train(tmp_path, *verl_lines, *ON_CPU, f"trainer.rollout_data_dir={dumps}", *joining(cluster))
    assert [h["step"] for h in history] == [1, 2]
    assert all(h["actor/grad_norm"] > 0 for h in history)
    FAMILY_CHECKS[family](history, dumped_generations(dumps))
