"""Every registered name and config key trains through main_ppo: estimators, losses and their parameters,
aggregations, KL estimators and controllers, reward managers, scorers, batching, schedules and engines.

Each row is one short real run that sets many names and keys at once (so the sweep stays a few
minutes on 2 cores) and checks the effect of what it sets where the effect shows in the metrics.
The runs share one Ray cluster; each joins it and its actors end with the run.
tests/test_everything_advertised_runs.py checks that together with the other runs they cover
every name and key.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch.distributed.checkpoint as dcp

from tests.trainer.helpers import dumped_generations, joining, train, train_cli
from verl_lite.trainer.validation import EMBEDDED_DATA, EMBEDDED_MODEL
from verl_lite.workers.engine.base import HF_CONFIG_DIR
from verl_lite.workers.lora import is_adapter

ARR = "actor_rollout_ref"
EXAMPLE_REWARD = str(Path(__file__).resolve().parents[2] / "examples" / "custom_reward.py")
# A row's values may name files in its run folder as RUN_DIR/...
ROWS = {
    # RLOO with GSPO's sequence-level ratio and DAPO's overlong penalty on the reward.
    "rloo_gspo_dapo": [
        "algorithm.adv_estimator=rloo",
        f"{ARR}.actor.policy_loss=gspo",
        f"{ARR}.actor.loss_agg_mode=seq-mean-token-mean",
        f"{ARR}.actor.clip_ratio_low=0.0003",
        f"{ARR}.actor.clip_ratio_high=0.0004",
        "reward.reward_manager=dapo",
        "reward.overlong_buffer.enable=true",
        "reward.overlong_buffer.len=20",
        "reward.overlong_buffer.penalty_factor=0.5",
    ],
    # REINFORCE++ with a KL penalty in the reward under the adaptive controller.
    "reinforce_pp_kl_in_reward": [
        "algorithm.adv_estimator=reinforce_plus_plus",
        "algorithm.gamma=0.99",
        f"{ARR}.actor.policy_loss=reinforce",
        f"{ARR}.actor.loss_agg_mode=token-sum",
        "algorithm.use_kl_in_reward=true",
        "algorithm.kl_penalty=abs",
        "algorithm.kl_ctrl.type=adaptive",
        "algorithm.kl_ctrl.kl_coef=0.01",
        "algorithm.kl_ctrl.target_kl=0.05",
        "algorithm.kl_ctrl.horizon=1000",
    ],
    # REINFORCE++ with a group baseline, GPG's loss, a k2 KL loss, an entropy bonus, and one scorer call per
    # step that gives the shortest correct response of each prompt a bonus.
    "reinforce_pp_baseline_kl_loss": [
        "algorithm.adv_estimator=reinforce_plus_plus_baseline",
        f"{ARR}.actor.policy_loss=gpg",
        f"{ARR}.actor.loss_agg_mode=seq-mean-token-sum",
        f"{ARR}.actor.use_kl_loss=true",
        f"{ARR}.actor.kl_loss_type=mse",
        f"{ARR}.actor.kl_loss_coef=0.01",
        f"{ARR}.actor.entropy_coeff=0.001",
        "reward.reward_manager=batch",
        f"reward.custom_reward_function.path={EXAMPLE_REWARD}",
        "reward.custom_reward_function.name=compute_score_batch",
        "+reward.reward_kwargs.length_bonus=0.25",
    ],
    # OPO, CISPO with a zero-width truncation window, the length-normalised aggregation with its own T,
    # and the score scaled then clipped.
    "opo_cispo_scaled_reward": [
        "algorithm.adv_estimator=opo",
        f"{ARR}.actor.policy_loss=cispo",
        f"{ARR}.actor.cispo_clip_ratio_low=0.0",
        f"{ARR}.actor.cispo_clip_ratio_high=0.0",
        f"{ARR}.actor.ppo_epochs=2",
        f"{ARR}.actor.loss_agg_mode=seq-mean-token-sum-norm",
        f"{ARR}.actor.loss_scale_factor=48.0",
        "reward.processors.scale=2.0",
        "reward.processors.clip_min=-1.0",
        "reward.processors.clip_max=1.5",
    ],
    # Pass@k advantages; Clip-Cov with a band and ratio that select every token, so no gradient is left.
    "grpo_passk_clip_cov": [
        "algorithm.adv_estimator=grpo_passk",
        f"{ARR}.actor.policy_loss=clip_cov",
        f"{ARR}.actor.clip_cov_ratio=1.0",
        f"{ARR}.actor.clip_cov_lb=-1000.0",
        f"{ARR}.actor.clip_cov_ub=1000.0",
    ],
    # GPG's estimator and loss; the generation dump gives each sample's score and group to check against.
    "gpg": [
        "algorithm.adv_estimator=gpg",
        f"{ARR}.actor.policy_loss=gpg",
        "trainer.rollout_data_dir=RUN_DIR/gen",
    ],
    # Dr.GRPO (no std division) with DAPO's dynamic sampling on the score, and KL-Cov on every token.
    "dr_grpo_filtered_kl_cov": [
        "algorithm.norm_adv_by_std_in_grpo=false",
        "algorithm.epsilon=1e-4",
        "algorithm.filter_groups.enable=true",
        "algorithm.filter_groups.metric=score",
        f"{ARR}.actor.policy_loss=kl_cov",
        f"{ARR}.actor.kl_cov_ratio=1.0",
        f"{ARR}.actor.kl_cov_coef=2.0",
    ],
    # Two epochs of small token-budgeted micro-batches, a cosine schedule with one warm-up step, the
    # engine and model switches, offloaded parameters and a sampling rollout with its own knobs.
    "actor_batching_schedule_rollout": [
        f"{ARR}.actor.ppo_epochs=2",
        f"{ARR}.actor.ppo_mini_batch_size=2",
        f"{ARR}.actor.ppo_micro_batch_size_per_gpu=3",
        f"{ARR}.actor.use_dynamic_bsz=true",
        f"{ARR}.actor.ppo_max_token_len_per_gpu=160",
        f"{ARR}.actor.shuffle=false",
        f"{ARR}.actor.clip_ratio_c=2.5",
        f"{ARR}.actor.optim.betas=[0.85,0.99]",
        f"{ARR}.actor.optim.weight_decay=0.01",
        f"{ARR}.actor.optim.grad_clip=0.5",
        f"{ARR}.actor.optim.lr_scheduler=cosine",
        f"{ARR}.actor.optim.min_lr_ratio=0.2",
        f"{ARR}.actor.optim.total_training_steps=3",
        f"{ARR}.actor.fsdp_config.param_offload=true",
        f"{ARR}.engine.name=fsdp",
        f"{ARR}.engine.backend=gloo",
        f"{ARR}.engine.param_dtype=float32",
        f"{ARR}.engine.seed=3",
        f"{ARR}.model.enable_gradient_checkpointing=true",
        f"{ARR}.model.trust_remote_code=true",
        f"{ARR}.rollout.temperature=0.8",
        f"{ARR}.rollout.top_p=0.95",
        f"{ARR}.rollout.top_k=20",
        f"{ARR}.rollout.max_num_seqs=3",
        f"{ARR}.rollout.response_length=16",
        f"{ARR}.rollout.checkpoint_engine=naive",
        f"{ARR}.rollout.update_weights_bucket_megabytes=1",
        "trainer.balance_batch=false",
        "trainer.project_name=sweep",
        "trainer.sample_timeout_s=120",
    ],
    # PPO with a critic that has its own batching, schedule, engine and model switches; the actor waits
    # one step (critic warm-up); the KV store runs two units under its own name.
    "gae_critic": [
        "algorithm.adv_estimator=gae",
        "critic.enable=true",
        "critic.critic.cliprange_value=0.2",
        "critic.critic.loss_agg_mode=seq-mean-token-mean",
        "critic.critic.ppo_epochs=2",
        "critic.critic.ppo_mini_batch_size=2",
        "critic.critic.ppo_micro_batch_size_per_gpu=3",
        "critic.critic.use_dynamic_bsz=true",
        "critic.critic.ppo_max_token_len_per_gpu=160",
        "critic.critic.shuffle=false",
        "critic.critic.optim.lr=5e-5",
        "critic.critic.optim.betas=[0.85,0.99]",
        "critic.critic.optim.weight_decay=0.01",
        "critic.critic.optim.grad_clip=0.5",
        "critic.critic.optim.lr_scheduler=cosine",
        "critic.critic.optim.warmup_steps_ratio=0.5",
        "critic.critic.optim.min_lr_ratio=0.2",
        "critic.critic.optim.total_training_steps=4",
        f"{ARR}.actor.optim.warmup_steps_ratio=0.5",
        "critic.log_prob_micro_batch_size_per_gpu=5",
        "critic.engine.name=fsdp",
        "critic.engine.backend=gloo",
        "critic.engine.param_dtype=float32",
        "critic.engine.seed=5",
        f"critic.model.path={EMBEDDED_MODEL}",
        f"critic.model.tokenizer_path={EMBEDDED_MODEL}",
        "critic.model.enable_gradient_checkpointing=true",
        "critic.model.trust_remote_code=true",
        "trainer.critic_warmup=1",
        "kv.num_storage_units=2",
        "kv.name_prefix=sweep_kv",
    ],
    # GRPO on LoRA adapters of the attention projections with packed rows: the KL loss's reference is the
    # base model (adapters off), and the old-log-prob and reference passes are cut by token budgets.
    "lora_packed_kl_loss": [
        f"{ARR}.model.lora_rank=8",
        f"{ARR}.model.lora_alpha=32",
        f"{ARR}.model.target_modules=[q_proj,k_proj,v_proj,o_proj]",
        f"{ARR}.model.lora_dropout=0.05",
        f"{ARR}.model.use_remove_padding=true",
        f"{ARR}.actor.optim.lr=1e-3",
        f"{ARR}.actor.use_kl_loss=true",
        f"{ARR}.actor.old_log_prob=recompute",
        f"{ARR}.rollout.log_prob_use_dynamic_bsz=true",
        f"{ARR}.rollout.log_prob_max_token_len_per_gpu=100",
        f"{ARR}.ref.log_prob_use_dynamic_bsz=true",
        f"{ARR}.ref.log_prob_max_token_len_per_gpu=120",
    ],
    # PPO whose critic trains LoRA adapters and its value head on packed rows, values cut by a token budget;
    # the checkpoint after step 2 shows what the critic trains.
    "gae_lora_critic": [
        "trainer.save_freq=2",
        "algorithm.adv_estimator=gae",
        "critic.model.lora_rank=4",
        "critic.model.lora_alpha=8",
        "critic.model.target_modules=all-linear",
        "critic.model.lora_dropout=0.0",
        "critic.model.use_remove_padding=true",
        "critic.log_prob_use_dynamic_bsz=true",
        "critic.log_prob_max_token_len_per_gpu=100",
        "critic.critic.optim.lr=1e-3",
    ],
    # PPO whose critic is a value head on the actor's body (no critic workers), trained in the actor's loss
    # on packed rows; the checkpoint after step 2 holds the head with the actor.
    "gae_actor_value_head": [
        "trainer.save_freq=2",
        "algorithm.adv_estimator=gae",
        f"{ARR}.actor.value_head.enable=true",
        f"{ARR}.actor.value_head.hidden_dim=32",
        f"{ARR}.actor.value_head.loss_coef=0.4",
        f"{ARR}.actor.value_head.cliprange_value=0.3",
        f"{ARR}.model.use_remove_padding=true",
    ],
}


def _check_rloo_gspo_dapo(steps: list[dict], run_dir: Path) -> None:
    # The penalty falls from 0 at 20 - 20 = 0 tokens... to -0.5 at 20: every sample gets <= 0 added.
    assert all(-0.5 <= h["reward_extra/overlong_reward/mean"] <= 0.0 for h in steps)
    assert all(h["critic/score/min"] >= -0.5 for h in steps)


def _check_reinforce_pp_kl_in_reward(steps: list[dict], run_dir: Path) -> None:
    # Step 1: the actor equals the reference, KL = 0, so the adaptive controller lowers the coefficient:
    # 0.01 * (1 + clip(0 / 0.05 - 1, -0.2, 0.2) * 16 / 1000) = 0.01 * 0.9968.
    assert steps[0]["actor/reward_kl_penalty_coeff"] == pytest.approx(0.01 * (1 - 0.2 * 16 / 1000))


def _check_reinforce_pp_baseline_kl_loss(steps: list[dict], run_dir: Path) -> None:
    assert steps[0]["actor/kl_loss"] == 0.0  # the reference equals the actor before the first update
    for h in steps:  # a group with a correct response has exactly one 1.25
        assert (h["critic/score/max"] == 1.25) == (h["critic/acc/mean"] > 0)


def _check_opo_cispo_scaled_reward(steps: list[dict], run_dir: Path) -> None:
    # Scores 0 / 1 become 0 / 2, clipped to 0 / 1.5.
    assert all(h["critic/score/max"] in (0.0, 1.5) and h["critic/score/min"] in (0.0, 1.5) for h in steps)
    # The second epoch's ratios leave 1, and a zero-width window truncates every one of them.
    assert all(h["actor/pg_clipfrac"] + h["actor/pg_clipfrac_lower"] > 0 for h in steps)


def _check_grpo_passk_clip_cov(steps: list[dict], run_dir: Path) -> None:
    assert all(h["actor/pg_cov_clipfrac"] == 1.0 and h["actor/grad_norm"] == 0.0 for h in steps)


def _check_dr_grpo_filtered_kl_cov(steps: list[dict], run_dir: Path) -> None:
    assert all(h["actor/pg_kl_cov_frac"] == 1.0 for h in steps)


def _check_gpg(steps: list[dict], run_dir: Path) -> None:
    # GPG's advantage is GRPO's, (score - group mean) / (group std + 1e-6), times alpha = batch / (batch -
    # rows of groups whose scores all agree): it keeps the batch-mean gradient's size where GRPO lets those
    # rows drop out (verl_lite/algorithms/group_advantages.py). Recomputed from the dumped scores, in float64;
    # the run's float32 values agree to a relative 1e-6, so 1e-5 is room, not tolerance for a wrong alpha
    # (alpha is a ratio of integers: 16/12 and 16/8 differ by 50%).
    dumped = dumped_generations(run_dir / "gen")
    for h in steps:
        rows = dumped[h["step"]]
        groups: dict[str, list[float]] = {}
        for r in rows:
            groups.setdefault(r["uid"], []).append(float(r["score"]))
        degenerate = sum(len(g) for g in groups.values() if len(set(g)) == 1)
        alpha = len(rows) / (len(rows) - degenerate)
        adv = []
        for r in rows:
            g = groups[r["uid"]]
            mean = sum(g) / len(g)
            std = math.sqrt(sum((x - mean) ** 2 for x in g) / (len(g) - 1))
            adv.append(alpha * (float(r["score"]) - mean) / (std + 1e-6))
        # the advantage metrics weigh each sample by its response tokens
        tokens = [r["response_len"] for r in rows]
        mean = sum(a * t for a, t in zip(adv, tokens)) / sum(tokens)
        assert h["critic/advantages/max"] == pytest.approx(max(adv), rel=1e-5, abs=1e-6)
        assert h["critic/advantages/min"] == pytest.approx(min(adv), rel=1e-5, abs=1e-6)
        assert h["critic/advantages/mean"] == pytest.approx(mean, rel=1e-5, abs=1e-6)
    # GPG's loss is -A * log pi with no ratio, so nothing is ever clipped. On-policy its gradient equals the
    # ratio loss's (grad of ratio = grad of log pi at ratio 1), but its value does not: one mini-batch, one
    # epoch, token-mean, the ratio loss would log -mean(A) to float32 rounding (~1e-7), GPG logs
    # -mean(A * log pi), which differs unless the tokens' A * (1 + log pi) cancel to 1e-4 by chance.
    assert all(h["actor/pg_clipfrac"] == 0.0 and h["actor/pg_clipfrac_lower"] == 0.0 for h in steps)
    assert any(abs(h["actor/pg_loss"] + h["critic/advantages/mean"]) > 1e-4 for h in steps)


# Keys of actor_batching_schedule_rollout whose effect no metric, file or dump of a 2-step CPU run shows,
# and why; every other key it sets is checked in _check_actor_batching_schedule_rollout.
NO_CPU_EFFECT = {
    "actor.ppo_micro_batch_size_per_gpu": "ignored under use_dynamic_bsz, which cuts micro-batches by tokens",
    "actor.use_dynamic_bsz": "changes only how a mini-batch is cut into micro-batches; no metric counts them",
    "actor.ppo_max_token_len_per_gpu": "the same: micro-batch cuts are not reported",
    "actor.shuffle": "only the order of rows inside an epoch; no metric or file records it",
    "actor.clip_ratio_c": "dual clip acts where ratio > 2.5 with A < 0; two on-policy epochs stay near 1",
    "actor.optim.betas": "Adam's moment decay; seen only by comparing against a run with other betas",
    "actor.optim.weight_decay": "the same: needs a second run to compare",
    "actor.optim.grad_clip": "actor/grad_norm is the norm before clipping; the clipped update is not reported",
    "actor.fsdp_config.param_offload": "on CPU the parameters already live in host memory",
    "engine.name": "fsdp is the default and only trained engine on CPU",
    "engine.backend": "gloo is the only backend on CPU",
    "engine.param_dtype": "CPU always trains in float32; the dtype applies to GPU mixed precision only",
    "engine.seed": "seen only against a run with another seed",
    "model.enable_gradient_checkpointing": "recomputes activations: same numbers, less memory",
    "model.trust_remote_code": "the embedded model is a transformers architecture; no remote code runs",
    "rollout.temperature": "the actor scores at the rollout's temperature too, so they agree at any value",
    "rollout.top_p": "truncates the sampling distribution; no token probabilities are dumped",
    "rollout.top_k": "the same",
    "rollout.max_num_seqs": "caps concurrent sequences of the hf server; no metric reports concurrency",
    "rollout.checkpoint_engine": "naive is the default; update_weights/bytes is the same for every engine",
    "rollout.update_weights_bucket_megabytes": "bucket count is not reported; bytes are the same",
    "trainer.balance_batch": "reorders rows across data-parallel ranks; one rank here",
    "trainer.project_name": "a logger label (W&B, MLflow); the jsonl logger's folder is the experiment name",
    "trainer.sample_timeout_s": "acts only when a sample takes longer than 120 s",
}


def _check_actor_batching_schedule_rollout(steps: list[dict], run_dir: Path) -> None:
    # The schedule advances once per training step (after its 4 optimizer steps: 4 prompts x 4 samples in
    # mini-batches of 2 prompts, 2 epochs), so every optimizer step of training step s uses the multiplier
    # of s (workers/engine/schedule.py), no warm-up: 0.2 + 0.8 * 0.5 * (1 + cos(pi * s / 3)) = 1 and 0.8.
    # (Per optimizer step, step 2 would be 0.2; without min_lr_ratio 0.75; over 2 steps 0.6.)
    assert steps[0]["actor/lr"] == pytest.approx(2e-5, rel=1e-12)
    assert steps[1]["actor/lr"] == pytest.approx(1.6e-5, rel=1e-12)
    # rollout.response_length=16 overrides FAST's data.max_response_length=24
    assert all(h["response_length/max"] <= 16 for h in steps)
    # Two epochs over two mini-batches recompute the old log-probs: the rollout's (same weights, same
    # temperature, float32 on CPU) agree to reduction-order error, far below 1e-4 in probability.
    assert all(h["training/rollout_probs_diff_mean"] < 1e-4 for h in steps)
    # The second epoch and mini-batch run on updated weights, so the ratio leaves 1 somewhere.
    assert any(h["actor/ppo_kl"] != 0.0 for h in steps)
    # each of these fails the check when left out (scripts/audit_key_effects.py)
    checked = {
        "actor.ppo_epochs",
        "actor.ppo_mini_batch_size",
        "actor.optim.lr_scheduler",
        "actor.optim.min_lr_ratio",
        "actor.optim.total_training_steps",
        "rollout.response_length",
    }
    row = ROWS["actor_batching_schedule_rollout"]
    keys = {o.split("=", 1)[0].removeprefix(f"{ARR}.") for o in row}
    assert keys == checked | set(NO_CPU_EFFECT), "every key of the row is checked or listed with its reason"


def _check_gae_critic(steps: list[dict], run_dir: Path) -> None:
    assert all("critic/vf_loss" in h for h in steps)
    assert "actor/pg_loss" not in steps[0] and "actor/pg_loss" in steps[1]  # critic_warmup=1


def _check_lora_packed_kl_loss(steps: list[dict], run_dir: Path) -> None:
    # LoRA's B starts at zero, so at step 1 the actor is its base: KL to the reference is rounding only.
    assert abs(steps[0]["actor/kl_loss"]) < 1e-6 and steps[1]["actor/kl_loss"] > 0
    # The embedded model's 4 layers each hold q, k, v, o projections of 128 -> 128: rank-8 adapters are
    # 8 * (128 + 128) = 2048 numbers each, 4 * 4 * 2048 * 4 bytes = 131072 bytes a sync.
    assert all(h["update_weights/bytes"] == 4 * 4 * 2048 * 4 for h in steps)
    # The rollout merged the adapters into its base: it samples from the actor's distribution.
    assert all(h["training/rollout_probs_diff_mean"] < 1e-4 for h in steps)


def _check_gae_lora_critic(steps: list[dict], run_dir: Path) -> None:
    assert all(h["critic/lr"] == 1e-3 and h["critic/vf_loss"] > 0 for h in steps)
    # The critic trains adapters: its checkpoint holds the LoRA A/B of every linear layer and the value head,
    # no base weight (with LoRA the base comes from model.path on load).
    (critic,) = run_dir.rglob("global_step_2/critic")
    stored = dcp.FileSystemReader(str(critic)).read_metadata().state_dict_metadata
    model_keys = [k for k in stored if k.startswith("model.")]
    base = [k for k in model_keys if not is_adapter(k) and "score" not in k]
    # all-linear on the embedded model: 4 layers x 7 projections (q, k, v, o, gate, up, down) x (A, B)
    assert base == [] and sum(is_adapter(k) for k in model_keys) == 4 * 7 * 2
    adapter = json.loads((critic / HF_CONFIG_DIR / "adapter_config.json").read_text())
    assert (adapter["r"], adapter["lora_alpha"], adapter["lora_dropout"]) == (4, 8, 0.0)


def _check_gae_actor_value_head(steps: list[dict], run_dir: Path) -> None:
    # the value loss is in the actor's update: no critic optimiser, no critic phase
    assert all(h["critic/vf_loss"] > 0 and "critic/grad_norm" not in h for h in steps)
    assert all("timing_s/update_critic" not in h and "timing_s/values" in h for h in steps)
    assert not list(run_dir.rglob("global_step_2/critic"))
    (actor,) = run_dir.rglob("global_step_2/actor")
    stored = dcp.FileSystemReader(str(actor)).read_metadata().state_dict_metadata
    # hidden_dim=32 on the embedded model's 128-wide body: a 32 x 128 tanh layer, then 1 x 32
    assert list(stored["model.value_head.layers.0.weight"].size) == [32, 128]
    assert list(stored["model.value_head.layers.2.weight"].size) == [1, 32]


CHECKS = {
    "gae_actor_value_head": _check_gae_actor_value_head,
    "gpg": _check_gpg,
    "gae_lora_critic": _check_gae_lora_critic,
    "rloo_gspo_dapo": _check_rloo_gspo_dapo,
    "reinforce_pp_kl_in_reward": _check_reinforce_pp_kl_in_reward,
    "reinforce_pp_baseline_kl_loss": _check_reinforce_pp_baseline_kl_loss,
    "opo_cispo_scaled_reward": _check_opo_cispo_scaled_reward,
    "grpo_passk_clip_cov": _check_grpo_passk_clip_cov,
    "dr_grpo_filtered_kl_cov": _check_dr_grpo_filtered_kl_cov,
    "actor_batching_schedule_rollout": _check_actor_batching_schedule_rollout,
    "gae_critic": _check_gae_critic,
    "lora_packed_kl_loss": _check_lora_packed_kl_loss,
}


def _run(tmp_path, cluster, *overrides):
    """A 2-step run joining ``cluster``; ``RUN_DIR`` in an override stands for the run folder."""
    return train(
        tmp_path,
        "trainer.total_training_steps=2",
        *joining(cluster),
        *[override.replace("RUN_DIR", str(tmp_path)) for override in overrides],
    )


def _finite_steps(history: list[dict]) -> list[dict]:
    steps = [h for h in history if h["step"] > 0]
    assert [h["step"] for h in steps] == [1, 2]
    for h in steps:
        bad = {k: v for k, v in h.items() if isinstance(v, float) and not math.isfinite(v)}
        assert not bad, f"non-finite metrics: {bad}"
        assert h.get("actor/grad_norm", 0.0) >= 0.0 and h["kv/controller_bytes_read"] == 0
    return steps


@pytest.mark.parametrize("row", sorted(ROWS))
def test_registered_names_train_through_main_ppo(tmp_path, cluster, row):
    steps = _finite_steps(_run(tmp_path, cluster, *ROWS[row]))
    CHECKS[row](steps, tmp_path)


def _write_rows(path, source: str | None, n: int = 24) -> str:
    """Arithmetic questions as plain strings under ``question`` (no chat messages), gsm8k style."""
    with open(path, "w") as f:
        for i in range(n):
            a, b = 3 + i, 5 + 2 * i
            row = {"question": f"Sam has {a} apples and buys {b} more. How many now?"}
            row["reward_model"] = {"ground_truth": str(a + b)}
            if source:
                row["data_source"] = source
            f.write(json.dumps(row) + "\n")
    return str(path)


@pytest.mark.parametrize("source", ["gsm8k", "math"])
def test_other_scorers_train_on_plain_string_prompts(tmp_path, cluster, source):
    # No data_source column: every row takes data.default_data_source, which picks the scorer.
    train_file = _write_rows(tmp_path / "train.jsonl", None)
    val_file = _write_rows(tmp_path / "val.jsonl", None, n=8)
    history = _run(
        tmp_path,
        cluster,
        f"data.train_files={train_file}",
        f"data.val_files={val_file}",
        "data.prompt_key=question",
        f"data.default_data_source={source}",
        "data.seed=7",
        "data.filter_overlong_prompts=false",
        "data.truncation=left",
        f"{ARR}.model.path={EMBEDDED_MODEL}",
        f"{ARR}.model.tokenizer_path={EMBEDDED_MODEL}",
        "data.max_prompt_length=80",
        f"{ARR}.rollout.val_kwargs.n=2",
        f"{ARR}.rollout.val_kwargs.do_sample=true",
        f"{ARR}.rollout.val_kwargs.temperature=0.7",
        f"{ARR}.rollout.val_kwargs.top_p=0.9",
        f"{ARR}.rollout.val_kwargs.top_k=10",
    )
    steps = _finite_steps(history)
    assert all(0.0 <= h["critic/score/mean"] <= 1.0 for h in steps)
    assert all(h["prompt_length/max"] <= 80 for h in steps)
    # two sampled validation answers per prompt: mean@2 and best@2 >= mean@2
    last = steps[-1]
    assert last[f"val-core/{source}/acc/best@2"] >= last[f"val-core/{source}/acc/mean@2"]


def test_sapo_keys_chunked_validation_and_staleness_control_in_one_run(tmp_path, cluster):
    val = pd.read_parquet(f"{EMBEDDED_DATA}/val.parquet").head(10)
    val.to_parquet(tmp_path / "val10.parquet")
    history = _run(
        tmp_path,
        cluster,
        f"data.val_files={tmp_path / 'val10.parquet'}",
        "data.val_batch_size=4",  # generate calls of 4, 4 and 2 prompts
        "trainer.val_before_train=true",
        f"trainer.validation_data_dir={tmp_path / 'val'}",
        "trainer.replay_buffer.max_off_policy_threshold=0",
        "trainer.replay_buffer.off_policy_strategy=wait",
        f"{ARR}.actor.policy_loss=sapo",
        f"{ARR}.actor.sapo_tau_pos=2.0",
        f"{ARR}.actor.sapo_tau_neg=3.0",
        f"{ARR}.actor.log_ratio_clamp=5.0",
    )
    questions = [info["question"] for info in val["extra_info"]]
    for step in (0, 2):  # before training and after the last step
        rows = [json.loads(line) for line in (tmp_path / "val" / f"{step}.jsonl").read_text().splitlines()]
        assert len(rows) == len(questions) and len({r["uid"] for r in rows}) == len(rows)
        assert all(sum(q in r["prompt"] for r in rows) == 1 for q in questions)
    last = _finite_steps(history)[-1]
    assert last["async/staleness/max"] == 0.0 and last["off_policy/evicted"] == 0.0
    assert "val-core/synthetic_arith/acc/mean@1" in last and last["actor/grad_norm"] > 0


def test_unsatisfiable_dynamic_sampling_fails_fast_saying_how_many_groups_were_kept(
    tmp_path, cluster, capsys
):
    # Greedy rollouts give every sample of a prompt the same answer: no group survives filtering.
    code, message = train_cli(
        tmp_path,
        capsys,
        "trainer.total_training_steps=2",
        *joining(cluster),
        f"{ARR}.rollout.do_sample=false",
        "algorithm.filter_groups.enable=true",
        "algorithm.filter_groups.max_num_gen_batches=1",
    )
    assert code == 3
    assert message.startswith(
        "verl_lite: the run stopped: ReplayBuffer.sample: DAPO dynamic sampling kept 0 of the 4 groups needed"
    ), message
    assert (
        "after 1 extra generation batch(es), the limit algorithm.filter_groups.max_num_gen_batches=1"
        in message
    )
