"""The policy worker: the actor (log-probs, PPO update, weights to send) and the reference policy.

Generation lives apart, in rollout servers (``verl_lite.workers.rollout``) driven by agent loops
(``verl_lite.workers.agent_loop``); in the hybrid placement a ``RolloutWorker`` shares this process.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

from verl_lite.algorithms import (
    PolicyLossConfig,
    RolloutCorrectionConfig,
    agg_loss,
    compute_rollout_correction,
    compute_value_loss,
    get_adv_estimator_needs,
    get_policy_loss_fn,
    kl_penalty,
    masked_mean,
)
from verl_lite.checkpoint_engine import get_checkpoint_engine
from verl_lite.kv import KVBatchMeta, get_kv_client
from verl_lite.single_controller import Dispatch, Execute, Worker, make_nd_dispatch, register
from verl_lite.trajectory import read_columns, write_columns
from verl_lite.utils.config import from_config
from verl_lite.utils.metrics import Metric, mean_of, means, reduce_metrics, spread
from verl_lite.workers.advantage import compute_shard_advantages
from verl_lite.workers.batching import RowBatch, rows_of, update_passes
from verl_lite.workers.config import ActorRolloutRefConfig
from verl_lite.workers.critic import score_values
from verl_lite.workers.engine import HF_CONFIG_DIR, get_engine
from verl_lite.workers.sequences import response_log_probs_and_entropy, response_values, unpad_rows

ROLES = ("actor", "ref")
# The mean |p_actor - p_rollout| of the sampled model tokens (compute_log_prob, or update_actor without it).
PROBS_DIFF = "training/rollout_probs_diff_mean"


class PolicyWorker(Worker):
    """The actor, the reference policy, or both (``role="actor"``, ``"ref"``, ``"actor_ref"``).

    Data-parallel methods take a ``KVBatchMeta``: each rank reads its rows from the KV store,
    computes, writes new fields back under the same keys and returns the meta (or metrics).
    """

    def __init__(self, config: Any, role: str = "actor_ref", rollout_correction: Any = None):
        super().__init__()
        self.config = from_config(ActorRolloutRefConfig, config)
        # algorithm.rollout_correction: what compute_log_prob corrects for against the rollout's log-probs
        self.correction = RolloutCorrectionConfig.from_any(rollout_correction)
        self.roles = set(role.split("_"))
        unknown = self.roles - set(ROLES)
        if unknown:
            raise ValueError(f"role {role!r} has unknown parts {sorted(unknown)}; combine {ROLES} with '_'.")
        self.actor = self.ref = self.sync = None

    # ---- set-up ---------------------------------------------------------------------------------
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Build the engines and the weight sender; declare this rank's DP place for each role."""
        from transformers import AutoTokenizer

        cfg = self.config
        self.tokenizer = AutoTokenizer.from_pretrained(cfg.model.tokenizer_path or cfg.model.path)
        self.pad_token_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        engine_cls = get_engine(cfg.engine.name)
        if "actor" in self.roles:
            head = cfg.actor.value_head if cfg.actor.value_head.enable else None
            self.actor = engine_cls(
                cfg.model, cfg.actor.optim, cfg.engine, fsdp_config=cfg.actor.fsdp_config, value_head=head
            )
        # A LoRA actor's reference policy is its own base (adapters off): no second copy of the model.
        if "ref" in self.roles and not (self.actor is not None and cfg.model.lora_rank > 0):
            self.ref = engine_cls(cfg.model, None, cfg.engine, fsdp_config=cfg.ref.fsdp_config)
        self.sync = get_checkpoint_engine(cfg.rollout.checkpoint_engine)(
            cfg.rollout.update_weights_bucket_megabytes, rank=self.rank
        )
        if self.actor is not None:
            self.sync.offer(self.actor.weights_to_sync)
        for mesh in self.roles:
            self.register_mesh(mesh, dp_rank=self.rank, is_collect=True)
        self.kv = get_kv_client()

    # ---- scoring --------------------------------------------------------------------------------
    def _read(self, meta: KVBatchMeta, fields: list[str]) -> RowBatch:
        return RowBatch(read_columns(self.kv, meta, fields), self.pad_token_id)

    @torch.no_grad()
    def _score(
        self, engine, meta: KVBatchMeta, with_entropy: bool, size: int, budget: int | None
    ) -> tuple[list, list]:
        """Log-probs (and entropy) of ``meta``'s responses under ``engine``, ``size`` rows or ``budget``
        tokens per forward."""
        batch = self._read(meta, ["prompts", "responses"])
        log_probs, entropies = [], []
        for mb in batch.micro_batches(list(range(len(batch))), size, budget):
            engine.model.eval()
            logits = engine.forward(mb)
            lp, ent = response_log_probs_and_entropy(
                logits, mb, self.config.rollout.temperature, with_entropy
            )
            log_probs.append(lp)
            entropies.append(ent)
        lengths = batch.response_lengths()
        rows_lp = [row for lp in log_probs for row in lp]
        out = {"lp": unpad_rows(_stack_rows(rows_lp), lengths)}
        if with_entropy:
            out["entropy"] = unpad_rows(_stack_rows([row for e in entropies for row in e]), lengths)
        return out, lengths

    @register(dispatch_mode=make_nd_dispatch("actor"))
    def compute_log_prob(self, meta: KVBatchMeta) -> KVBatchMeta:
        """Write ``old_log_probs`` and per-token ``entropy`` of the current policy for ``meta``'s rows.

        With off-policy correction configured (``algorithm.rollout_correction``) it also writes
        ``rollout_is_weights`` and ``rollout_rs_mask`` against the stored ``rollout_log_probs``.
        """
        cfg = self.config.rollout
        budget = cfg.log_prob_max_token_len_per_gpu if cfg.log_prob_use_dynamic_bsz else None
        out, _ = self._score(self.actor, meta, True, cfg.log_prob_micro_batch_size_per_gpu, budget)
        fields = {"old_log_probs": out["lp"], "entropy": out["entropy"]}
        metrics = {}
        if "rollout_log_probs" in meta.fields and len(meta):
            masked = "response_mask" in meta.fields
            wanted = ["rollout_log_probs", "response_mask"] if masked else ["rollout_log_probs"]
            td = read_columns(self.kv, meta, wanted)
            diff = (out["lp"].values().exp() - td["rollout_log_probs"].values().exp()).abs()
            if masked:  # tool/observation tokens were not sampled by the rollout
                diff = diff[td["response_mask"].values().bool()]
            metrics = mean_of(PROBS_DIFF, diff)
            if self.correction.enabled:
                metrics.update(self._correct(fields, out, td, self.correction))
        result = self._write(meta, fields)
        result.metrics = metrics
        return result

    @staticmethod
    def _correct(fields: dict, out: dict, td, config: RolloutCorrectionConfig) -> dict[str, Metric]:
        """Add ``rollout_is_weights`` / ``rollout_rs_mask`` to ``fields`` from the old log-probs ``out["lp"]``
        and ``td``'s ``rollout_log_probs`` (and ``response_mask``); returns their metrics: the weights of
        trained tokens, the share of sampled tokens whose weight was truncated, of trajectories rejected."""
        old = rows_of(out, "lp")
        rollout = rows_of(td, "rollout_log_probs")
        sampled = (
            rows_of(td, "response_mask")
            if "response_mask" in td.keys()
            else [torch.ones_like(r) for r in old]
        )
        padded = [_stack_rows([row.to(torch.float32) for row in rows]) for rows in (old, rollout, sampled)]
        lengths = [int(row.numel()) for row in old]
        weights, kept, clipped = compute_rollout_correction(*padded, config)
        fields["rollout_is_weights"] = unpad_rows(weights, lengths)
        fields["rollout_rs_mask"] = unpad_rows(kept, lengths)
        sampled_rows = padded[2].sum(-1) > 0
        rejected = (kept.sum(-1) == 0) & sampled_rows
        metrics = spread("off_policy/is_weight", weights[kept.bool()])
        metrics.update(mean_of("off_policy/is_weight/clip_fraction", clipped[padded[2].bool()]))
        metrics.update(mean_of("off_policy/rejected_fraction", rejected[sampled_rows]))
        return metrics

    @register(dispatch_mode=make_nd_dispatch("ref"))
    def compute_ref_log_prob(self, meta: KVBatchMeta) -> KVBatchMeta:
        """Write ``ref_log_prob`` (log-probs under the frozen reference policy; a LoRA actor's base model)."""
        cfg = self.config.ref
        budget = cfg.log_prob_max_token_len_per_gpu if cfg.log_prob_use_dynamic_bsz else None
        if self.ref is not None:
            out, _ = self._score(self.ref, meta, False, cfg.log_prob_micro_batch_size_per_gpu, budget)
        else:
            with self.actor.adapters_disabled():
                out, _ = self._score(self.actor, meta, False, cfg.log_prob_micro_batch_size_per_gpu, budget)
        return self._write(meta, {"ref_log_prob": out["lp"]})

    @register(dispatch_mode=make_nd_dispatch("actor"))
    def compute_values(self, meta: KVBatchMeta) -> KVBatchMeta:
        """Write ``values`` from the actor's value head (``actor.value_head.enable``: the critic shares the
        policy's body), with the log-prob forwards' micro-batching."""
        cfg = self.config.rollout
        budget = cfg.log_prob_max_token_len_per_gpu if cfg.log_prob_use_dynamic_bsz else None
        self.actor.model.eval()
        batch = self._read(meta, ["prompts", "responses"])
        values = score_values(
            batch,
            lambda mb: self.actor.forward_with_values(mb)[1],
            cfg.log_prob_micro_batch_size_per_gpu,
            budget,
        )
        return self._write(meta, {"values": values})

    def _write(self, meta: KVBatchMeta, fields: dict) -> KVBatchMeta:
        if len(meta):
            write_columns(self.kv, meta.keys, meta.partition_id, fields)
        return meta.with_fields(fields)

    @register(dispatch_mode=Dispatch.RANK_ZERO, execute_mode=Execute.RANK_ZERO)
    def compute_advantage(self, meta: KVBatchMeta, algorithm: Any, kl_coef: float = 0.0) -> dict[str, Metric]:
        """Token rewards, advantages and returns for the whole batch; returns its metrics.

        One rank sees every row, so batch-wide normalisation (GAE and REINFORCE++ whitening) uses the
        whole batch whatever the data-parallel size; the math is elementwise and cheap next to a forward.
        """
        if not len(meta):
            return {}
        wanted = ["prompts", "responses", "token_level_scores"]
        if "response_mask" in meta.fields:
            wanted.append("response_mask")
        if algorithm.use_kl_in_reward:
            wanted += ["old_log_probs", "ref_log_prob"]
        if "values" in meta.fields:
            wanted.append("values")
        if get_adv_estimator_needs(algorithm.adv_estimator).greedy_baseline:
            wanted.append("reward_baselines")
        td = read_columns(self.kv, meta, wanted)
        fields, metrics = compute_shard_advantages(td, meta.group_ids(), algorithm, kl_coef)
        write_columns(self.kv, meta.keys, meta.partition_id, fields)
        return metrics

    # ---- PPO update -----------------------------------------------------------------------------
    @register(dispatch_mode=make_nd_dispatch("actor"))
    def update_actor(self, meta: KVBatchMeta) -> dict[str, Metric]:
        """ppo_epochs x shuffled mini-batches x micro-batches of the policy loss; returns ``actor/*`` means
        over the mini-batches (and ``training/rollout_probs_diff_mean`` when nothing recomputed old log-probs).

        With a value head the loss adds ``value_head.loss_coef`` times the clipped value loss (``critic/*``)."""
        cfg = self.config.actor
        # Without old_log_probs (one on-policy pass) the update's own detached log-probs stand in.
        fields = ["prompts", "responses"]
        optional = (
            "advantages",
            "response_mask",
            "old_log_probs",
            "rollout_log_probs",
            "rollout_is_weights",
            "rollout_rs_mask",
        )
        fields += [f for f in optional if f in meta.fields]
        if cfg.use_kl_loss:
            fields.append("ref_log_prob")
        if self.actor.value_head is not None:
            fields += ["values", "returns"]
        batch = self._read(meta, fields)
        if "advantages" not in meta.fields:  # a sequence-level estimator's, one per trajectory's tag
            batch.extra["advantages"] = [
                torch.full((n,), float(tag["advantage"]))
                for n, tag in zip(batch.response_lengths(), meta.tags)
            ]
        dp_size = dist.get_world_size()
        loss_fn = get_policy_loss_fn(cfg.policy_loss)
        loss_config = PolicyLossConfig.from_any(cfg)
        # Dr. GRPO's constant T: one number for every micro-batch, never a micro-batch's padded width
        norm_length = cfg.loss_scale_factor or self.config.rollout.response_length
        history: list[dict[str, float]] = []
        for micro, agg in update_passes(batch, cfg, meta, dp_size):
            agg = {**agg, "norm_length": norm_length}
            mb_metrics = [
                self.actor.forward_backward(mb, self._policy_loss(loss_fn, loss_config, agg)) for mb in micro
            ]
            summed = {
                k: sum(m[k] for m in mb_metrics)
                for k in ("actor/pg_loss", "actor/kl_loss", "critic/vf_loss")
                if k in mb_metrics[0]
            }
            averaged = reduce_metrics([means(mb_metrics)])
            averaged.update({k: v / dp_size for k, v in summed.items()})
            averaged.update({f"actor/{k}": v for k, v in self.actor.optimizer_step().items()})
            history.append(averaged)
        self.actor.lr_scheduler_step()  # once per training step, however many optimizer steps it made
        return means(history)

    def _policy_loss(self, loss_fn, loss_config: PolicyLossConfig, agg: dict):
        cfg = self.config.actor
        temperature = self.config.rollout.temperature
        with_values = self.actor.value_head is not None

        def compute(output: Any, mb: dict[str, torch.Tensor]):
            logits, values = output if with_values else (output, None)
            mask = mb["response_mask"].float()
            # without entropy_coeff the entropy is only a metric: no autograd graph for it
            log_prob, entropy = response_log_probs_and_entropy(
                logits, mb, temperature, with_entropy=True, entropy_requires_grad=bool(cfg.entropy_coeff)
            )
            old_log_prob = mb.get("old_log_probs")
            # off-policy importance weights multiply each token's policy loss (not the entropy or KL terms)
            loss_agg = (
                agg if "rollout_is_weights" not in mb else {**agg, "loss_weights": mb["rollout_is_weights"]}
            )
            extra_metrics = {}
            if old_log_prob is None:
                old_log_prob = log_prob.detach()
                if "rollout_log_probs" in mb:
                    diff = (old_log_prob.exp() - mb["rollout_log_probs"].exp()).abs()
                    extra_metrics[PROBS_DIFF] = float(masked_mean(diff, mask))
            pg_loss, pg_metrics = loss_fn(
                old_log_prob,
                log_prob,
                mb["advantages"],
                mask,
                loss_agg_mode=cfg.loss_agg_mode,
                config=loss_config,
                **loss_agg,
            )
            loss = pg_loss
            metrics = {
                "actor/pg_loss": float(pg_loss.detach()),
                "actor/entropy": float(masked_mean(entropy.detach(), mask)),
            }
            metrics.update({f"actor/{k}": float(v) for k, v in pg_metrics.items()})
            metrics.update(extra_metrics)
            if cfg.entropy_coeff:
                loss = loss - cfg.entropy_coeff * agg_loss(entropy, mask, cfg.loss_agg_mode, **agg)
            if cfg.use_kl_loss:
                kl = kl_penalty(log_prob, mb["ref_log_prob"], cfg.kl_loss_type)
                kl_loss = agg_loss(kl, mask, cfg.loss_agg_mode, **agg)
                loss = loss + cfg.kl_loss_coef * kl_loss
                metrics["actor/kl_loss"] = float(kl_loss.detach())
            if values is not None:
                head = cfg.value_head
                vpreds = response_values(values, mask.shape[1])
                vf_loss, vf_metrics = compute_value_loss(
                    vpreds, mb["returns"], mb["values"], mask, head.cliprange_value, cfg.loss_agg_mode, **agg
                )
                loss = loss + head.loss_coef * vf_loss
                metrics["critic/vf_loss"] = float(vf_loss.detach())
                metrics["critic/vf_clipfrac"] = float(vf_metrics["vf_clipfrac"])
                metrics["critic/vpred_mean"] = float(masked_mean(vpreds.detach(), mask))
            return loss, metrics

        return compute

    # ---- weight sync --------------------------------------------------------------------------
    @register(dispatch_mode=Dispatch.RANK_ZERO)
    def send_weights(self, version: int) -> Any:
        """Training side of a cross-process sync: every actor rank gathers, rank 0 returns the handle."""
        return self.sync.send_weights(self.actor.weights_to_sync(), version)

    # ---- checkpoints ----------------------------------------------------------------------------
    @register(dispatch_mode=Dispatch.ONE_TO_ALL, execute_mode=Execute.ALL)
    def save_checkpoint(self, path: str, hf_path: str | None = None) -> None:
        """Sharded checkpoint of the actor (and tokenizer) under ``path``; a Hugging Face export under ``hf_path``."""
        self.actor.save_checkpoint(path)
        if self.rank == 0:
            self.tokenizer.save_pretrained(os.path.join(path, HF_CONFIG_DIR))
        if hf_path:
            self.actor.export_hf(hf_path, self.tokenizer)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, path: str) -> None:
        """Restore the actor from ``save_checkpoint``'s folder (the rollout gets it at the next weight sync)."""
        self.actor.load_checkpoint(path)


def _stack_rows(rows: list[torch.Tensor]) -> torch.Tensor:
    width = max(r.numel() for r in rows)
    out = torch.zeros(len(rows), width, dtype=rows[0].dtype)
    for i, row in enumerate(rows):
        out[i, : row.numel()] = row
    return out


__all__ = ["PROBS_DIFF", "PolicyWorker"]
