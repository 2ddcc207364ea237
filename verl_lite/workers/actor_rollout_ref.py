"""The policy worker: actor (PPO update), rollout (generation) and reference roles in one process."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
from tensordict import TensorDict

from verl_lite.algorithms import (
    PolicyLossConfig,
    agg_loss,
    get_adv_estimator_needs,
    get_policy_loss_fn,
    kl_penalty,
    masked_mean,
)
from verl_lite.checkpoint_engine import get_checkpoint_engine
from verl_lite.kv import KVBatchMeta, get_kv_client, trajectory_key, trajectory_tag
from verl_lite.protocol import to_jagged
from verl_lite.single_controller import Dispatch, Execute, Worker, make_nd_dispatch, register
from verl_lite.utils.config import from_config
from verl_lite.workers.advantage import compute_shard_advantages
from verl_lite.workers.batching import RowBatch, mean_metrics, rows_of, update_passes
from verl_lite.workers.config import ActorRolloutRefConfig, SamplingConfig
from verl_lite.workers.engine import HF_CONFIG_DIR, get_engine
from verl_lite.workers.rollout import get_rollout
from verl_lite.workers.sequences import on_last_token, response_log_probs_and_entropy, unpad_rows

ROLES = ("actor", "rollout", "ref")
# Fields generate_sequences writes for every trajectory (token_level_scores only with a reward manager).
TRAJECTORY_FIELDS = ("prompts", "responses", "response_mask", "rollout_log_probs", "token_level_scores")
# One greedy decode per prompt: the baseline response of estimators that declare greedy_baseline (ReMax).
GREEDY_SAMPLING = SamplingConfig(n=1, temperature=0.0, do_sample=False)
# Per-prompt python fields the rollout hands to the reward manager when the prompt keys hold them.
ROW_FIELDS = ("raw_prompt", "data_source", "ground_truth", "extra_info")
# compute_log_prob leaves one (sum, count) of |p_actor - p_rollout| per rank in the returned meta's extra_info.
PROBS_DIFF_PREFIX = "rollout_probs_diff/rank"
# generate_sequences leaves each rank's reward-scoring seconds in the returned meta's extra_info.
REWARD_TIME_PREFIX = "reward_time_s/rank"


def rollout_probs_diff_mean(meta: KVBatchMeta) -> float | None:
    """``training/rollout_probs_diff_mean``: mean |p_actor - p_rollout| of the sampled tokens over all ranks."""
    parts = [v for k, v in meta.extra_info.items() if k.startswith(PROBS_DIFF_PREFIX)]
    count = sum(n for _, n in parts)
    return sum(s for s, _ in parts) / count if count else None


def reward_seconds(meta: KVBatchMeta) -> float:
    """Seconds the slowest rollout rank spent scoring its samples (``timing_s/reward``)."""
    return max((v for k, v in meta.extra_info.items() if k.startswith(REWARD_TIME_PREFIX)), default=0.0)


class ActorRolloutRefWorker(Worker):
    """Any combination of the actor, rollout and ref roles (``role="actor_rollout_ref"`` ...).

    Data-parallel methods take a ``KVBatchMeta``: each rank reads its rows from the KV store,
    computes, writes new fields back under the same keys and returns the meta (or metrics).
    """

    def __init__(self, config: Any, role: str = "actor_rollout_ref", reward_config: Any = None):
        super().__init__()
        self.config = from_config(ActorRolloutRefConfig, config)
        self.reward_config = reward_config
        self.reward_manager = None
        self.roles = set(role.split("_"))
        unknown = self.roles - set(ROLES)
        if unknown:
            raise ValueError(f"role {role!r} has unknown parts {sorted(unknown)}; combine {ROLES} with '_'.")
        self.actor = self.ref = self.rollout = self.sync = None
        # rollout.free_cache_engine: the rollout sleeps between generation and the next weight sync.
        self.rollout_sleeps = self.rollout_asleep = False

    # ---- set-up ---------------------------------------------------------------------------------
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Build the engines and the rollout backend; declare this rank's DP place for each role."""
        from transformers import AutoTokenizer

        cfg = self.config
        self.tokenizer = AutoTokenizer.from_pretrained(cfg.model.tokenizer_path or cfg.model.path)
        self.pad_token_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        engine_cls = get_engine(cfg.engine.name)
        if "actor" in self.roles:
            self.actor = engine_cls(cfg.model, cfg.actor.optim, cfg.engine, fsdp_config=cfg.actor.fsdp_config)
        # A LoRA actor's reference policy is its own base (adapters off): no second copy of the model.
        if "ref" in self.roles and not (self.actor is not None and cfg.model.lora_rank > 0):
            self.ref = engine_cls(cfg.model, None, cfg.engine, fsdp_config=cfg.ref.fsdp_config)
        if "rollout" in self.roles:
            rollout_cls = get_rollout(cfg.rollout.name)
            lora = (
                {"lora_rank": cfg.model.lora_rank}
                if cfg.model.lora_rank and rollout_cls.serves_lora_adapters
                else {}
            )
            self.rollout = rollout_cls(
                cfg.model.path, cfg.rollout, self.tokenizer.eos_token_id, self.pad_token_id, **lora
            )
        self._decide_rollout_sleep()
        self.sync = get_checkpoint_engine(cfg.rollout.checkpoint_engine)(
            cfg.rollout.update_weights_bucket_megabytes, rank=self.rank
        )
        if "rollout" in self.roles and self.reward_config is not None:
            from verl_lite.reward import build_reward_manager

            self.reward_manager = build_reward_manager(self.reward_config)
        for mesh in self.roles:
            self.register_mesh(mesh, dp_rank=self.rank, is_collect=True)
        self.kv = get_kv_client()

    def _decide_rollout_sleep(self) -> None:
        """Sleep only with free_cache_engine, the actor training in this process, and a backend that can."""
        if not (self.config.rollout.free_cache_engine and {"actor", "rollout"} <= self.roles):
            return
        self.rollout_sleeps = self.rollout.supports_sleep
        if not self.rollout_sleeps and self.rank == 0:
            print(
                f"verl_lite: rollout.free_cache_engine=true skipped: the {self.config.rollout.name!r} rollout "
                "backend cannot sleep on this machine (vLLM sleeps on CUDA only; hf keeps no cache between calls).",
                file=sys.stderr,
                flush=True,
            )

    def _sleep_rollout(self) -> None:
        if self.rollout_sleeps and not self.rollout_asleep:
            self.rollout.sleep()
            self.rollout_asleep = True

    def _wake_rollout(self) -> None:
        if self.rollout_asleep:
            self.rollout.wake_up()
            self.rollout_asleep = False

    # ---- scoring --------------------------------------------------------------------------------
    def _read(self, meta: KVBatchMeta, fields: list[str]) -> RowBatch:
        td = self.kv.kv_batch_get(meta.keys, meta.partition_id, select_fields=fields)
        return RowBatch(td, self.pad_token_id)

    @torch.no_grad()
    def _score(
        self, engine, meta: KVBatchMeta, with_entropy: bool, size: int, budget: int | None
    ) -> tuple[list, list]:
        """Log-probs (and entropy) of ``meta``'s responses under ``engine``, ``size`` rows or ``budget`` tokens per forward."""
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
        """Write ``old_log_probs`` and per-token ``entropy`` of the current policy for ``meta``'s rows."""
        cfg = self.config.rollout
        budget = cfg.log_prob_max_token_len_per_gpu if cfg.log_prob_use_dynamic_bsz else None
        out, _ = self._score(self.actor, meta, True, cfg.log_prob_micro_batch_size_per_gpu, budget)
        fields = TensorDict({"old_log_probs": out["lp"], "entropy": out["entropy"]}, batch_size=[len(meta)])
        result = self._write(meta, fields)
        if "rollout_log_probs" in meta.fields and len(meta):
            td = self.kv.kv_batch_get(meta.keys, meta.partition_id, select_fields=["rollout_log_probs"])
            diff = (out["lp"].values().exp() - td["rollout_log_probs"].values().exp()).abs()
            result.extra_info = {
                **result.extra_info,
                f"{PROBS_DIFF_PREFIX}{self.rank}": (float(diff.sum()), diff.numel()),
            }
        return result

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
        return self._write(meta, TensorDict({"ref_log_prob": out["lp"]}, batch_size=[len(meta)]))

    def _write(self, meta: KVBatchMeta, fields: TensorDict) -> KVBatchMeta:
        if len(meta):
            self.kv.kv_batch_put(meta.keys, meta.partition_id, fields=fields)
        return KVBatchMeta(
            keys=meta.keys,
            tags=meta.tags,
            partition_id=meta.partition_id,
            fields=sorted(set(meta.fields) | set(fields.keys())),
            extra_info=meta.extra_info,
        )

    @register(dispatch_mode=Dispatch.RANK_ZERO, execute_mode=Execute.RANK_ZERO)
    def compute_advantage(self, meta: KVBatchMeta, algorithm: Any, kl_coef: float = 0.0) -> dict[str, float]:
        """Token rewards, advantages and returns for the whole batch; returns its sum/count/max/min statistics.

        One rank sees every row, so batch-wide normalisation (GAE and REINFORCE++ whitening) uses the
        whole batch whatever the data-parallel size; the math is elementwise and cheap next to a forward.
        """
        if not len(meta):
            return {}
        wanted = ["prompts", "responses", "token_level_scores"]
        if algorithm.use_kl_in_reward:
            wanted += ["old_log_probs", "ref_log_prob"]
        if "values" in meta.fields:
            wanted.append("values")
        if get_adv_estimator_needs(algorithm.adv_estimator).greedy_baseline:
            wanted.append("reward_baselines")
        td = self.kv.kv_batch_get(meta.keys, meta.partition_id, select_fields=wanted)
        uids = [tag.get("uid", key.rsplit("_", 2)[0]) for key, tag in zip(meta.keys, meta.tags)]
        fields, stats = compute_shard_advantages(td, uids, algorithm, kl_coef)
        self.kv.kv_batch_put(meta.keys, meta.partition_id, fields=TensorDict(fields, batch_size=[len(meta)]))
        return stats

    # ---- PPO update -----------------------------------------------------------------------------
    @register(dispatch_mode=make_nd_dispatch("actor"))
    def update_actor(self, meta: KVBatchMeta) -> dict[str, float]:
        """ppo_epochs x shuffled mini-batches x micro-batches of the policy loss; returns mean metrics."""
        cfg = self.config.actor
        # Without old_log_probs (one on-policy pass) the update's own detached log-probs stand in.
        fields = ["prompts", "responses", "advantages"]
        fields += [f for f in ("old_log_probs", "rollout_log_probs") if f in meta.fields]
        if cfg.use_kl_loss:
            fields.append("ref_log_prob")
        batch = self._read(meta, fields)
        dp_size = dist.get_world_size()
        loss_fn = get_policy_loss_fn(cfg.policy_loss)
        loss_config = PolicyLossConfig.from_any(cfg)
        history: list[dict[str, float]] = []
        for micro, agg in update_passes(batch, cfg, meta.extra_info, dp_size):
            mb_metrics = [
                self.actor.forward_backward(mb, self._policy_loss(loss_fn, loss_config, agg)) for mb in micro
            ]
            summed = {k: sum(m[k] for m in mb_metrics) for k in ("pg_loss", "kl_loss") if k in mb_metrics[0]}
            averaged = mean_metrics(mb_metrics)
            averaged.update({k: v / dp_size for k, v in summed.items()})
            averaged.update(self.actor.optimizer_step())
            history.append(averaged)
        return {f"actor/{k}": v for k, v in mean_metrics(history).items()}

    def _policy_loss(self, loss_fn, loss_config: PolicyLossConfig, agg: dict):
        cfg = self.config.actor
        temperature = self.config.rollout.temperature

        def compute(logits: torch.Tensor, mb: dict[str, torch.Tensor]):
            mask = mb["response_mask"].float()
            log_prob, entropy = response_log_probs_and_entropy(logits, mb, temperature, with_entropy=True)
            old_log_prob = mb.get("old_log_probs")
            extra_metrics = {}
            if old_log_prob is None:
                old_log_prob = log_prob.detach()
                if "rollout_log_probs" in mb:
                    diff = (old_log_prob.exp() - mb["rollout_log_probs"].exp()).abs()
                    extra_metrics["rollout_probs_diff_mean"] = float(masked_mean(diff, mask))
            pg_loss, pg_metrics = loss_fn(
                old_log_prob,
                log_prob,
                mb["advantages"],
                mask,
                loss_agg_mode=cfg.loss_agg_mode,
                config=loss_config,
                **agg,
            )
            loss = pg_loss
            metrics = {
                "pg_loss": float(pg_loss.detach()),
                "entropy": float(masked_mean(entropy.detach(), mask)),
            }
            metrics.update({k: float(v) for k, v in pg_metrics.items()})
            metrics.update(extra_metrics)
            if cfg.entropy_coeff:
                loss = loss - cfg.entropy_coeff * agg_loss(entropy, mask, cfg.loss_agg_mode, **agg)
            if cfg.use_kl_loss:
                kl = kl_penalty(log_prob, mb["ref_log_prob"], cfg.kl_loss_type)
                kl_loss = agg_loss(kl, mask, cfg.loss_agg_mode, **agg)
                loss = loss + cfg.kl_loss_coef * kl_loss
                metrics["kl_loss"] = float(kl_loss.detach())
            return loss, metrics

        return compute

    # ---- generation and weight sync -------------------------------------------------------------
    @register(dispatch_mode=make_nd_dispatch("rollout"))
    def generate_sequences(
        self, meta: KVBatchMeta, validate: bool = False, greedy_baseline: bool = False
    ) -> KVBatchMeta:
        """Generate ``n`` responses per prompt key, score them, write trajectories ``{uid}_{sample}_0``.

        Reads ``prompts`` (token ids) and, when present, the per-row ``data_source``,
        ``ground_truth``, ``extra_info`` and ``raw_prompt`` of the prompt-group keys. Writes
        ``prompts``, ``responses``, ``response_mask``, ``rollout_log_probs`` and (with a reward
        manager) ``token_level_scores`` per trajectory, tags each trajectory with its ``score`` and
        ``acc``, and marks each group ``finished`` (or ``failure`` when scoring raised).

        With ``greedy_baseline`` (the estimator declares ``EstimatorNeeds.greedy_baseline``, as
        ReMax does) each prompt also gets one greedy response, scored by the same reward manager;
        its score is written to every sampled trajectory of the prompt as the (batch,) field
        ``reward_baselines``. The greedy response itself is not stored and not trained on. The
        baseline is a field rather than a group tag because it is an input of the estimator, which
        reads its inputs from the store next to ``token_level_scores``; tags stay what the
        controller and the replay buffer decide on.
        """
        rollout_cfg = self.config.rollout
        sampling = rollout_cfg.val_kwargs if validate else rollout_cfg.train_sampling()
        if not len(meta):
            return KVBatchMeta(keys=[], partition_id=meta.partition_id, extra_info=meta.extra_info)
        rows = self._read_prompt_rows(meta)
        prompts = rows.pop("prompts")
        self._wake_rollout()
        generations = self.rollout.generate(prompts, sampling, rollout_cfg.response_length)
        greedy = None
        if greedy_baseline and not validate:
            greedy = self.rollout.generate(prompts, GREEDY_SAMPLING, rollout_cfg.response_length)
        self._sleep_rollout()  # scoring and training need no engine memory
        step = int(meta.extra_info.get("global_steps", 0))
        uids = [tag.get("uid", key) for key, tag in zip(meta.keys, meta.tags)]
        scoring_start = time.perf_counter()
        results = self._score_generations(generations, prompts, rows)
        keys, tags = [], []
        group_failed: dict[str, str] = {}
        baselines = None
        if greedy is not None:
            baselines, errors = self._greedy_baselines(greedy, prompts, rows)
            group_failed.update({uids[i]: error for i, error in errors.items()})
        scoring_s = time.perf_counter() - scoring_start
        for gen, result in zip(generations, results):
            uid = uids[gen.prompt_index]
            keys.append(trajectory_key(uid, gen.sample_index, 0))
            extra = {"finish_reason": gen.finish_reason, "weight_version": self.rollout.weight_version}
            status = "success"
            if result is not None:
                extra.update(score=result["score"], acc=result["acc"])
                if result["pred"] is not None:
                    extra["pred"] = str(result["pred"])
                if result["reward_extra"]:
                    extra["reward_extra"] = result["reward_extra"]
                if result.get("error"):
                    status, extra["error"] = "failure", result["error"]
                    group_failed[uid] = result["error"]
            tags.append(
                trajectory_tag(
                    uid, status, prompts[gen.prompt_index].numel(), gen.response_ids.numel(), step, **extra
                )
            )
        responses = [g.response_ids for g in generations]
        fields = {
            "prompts": to_jagged([prompts[g.prompt_index] for g in generations]),
            "responses": to_jagged(responses),
            "response_mask": to_jagged([torch.ones(r.numel(), dtype=torch.int64) for r in responses]),
            "rollout_log_probs": to_jagged([g.log_probs for g in generations]),
        }
        if results[0] is not None:
            fields["token_level_scores"] = to_jagged(
                [on_last_token(r.numel(), res["score"]) for r, res in zip(responses, results)]
            )
        if baselines is not None:
            fields["reward_baselines"] = torch.tensor(
                [baselines[g.prompt_index] for g in generations], dtype=torch.float32
            )
        out = self.kv.kv_batch_put(
            keys, meta.partition_id, fields=TensorDict(fields, batch_size=[len(keys)]), tags=tags
        )
        group_tags = [
            {
                **tag,
                "status": "failure" if uid in group_failed else "finished",
                **({"error": group_failed[uid]} if uid in group_failed else {}),
            }
            for uid, tag in zip(uids, meta.tags)
        ]
        self.kv.kv_update_tags(meta.keys, meta.partition_id, group_tags)
        out.extra_info = {**meta.extra_info, f"{REWARD_TIME_PREFIX}{self.rank}": scoring_s}
        return out

    @register(dispatch_mode=make_nd_dispatch("rollout"))
    def decode_trajectories(self, meta: KVBatchMeta) -> dict[str, dict[str, str]]:
        """``{key: {"prompt": text, "response": text}}`` for ``meta``'s trajectories (for the JSONL dumps)."""
        if not len(meta):
            return {}
        td = self.kv.kv_batch_get(meta.keys, meta.partition_id, select_fields=["prompts", "responses"])
        decode = self.tokenizer.batch_decode
        prompts = decode(rows_of(td, "prompts"), skip_special_tokens=True)
        responses = decode(rows_of(td, "responses"), skip_special_tokens=True)
        return {key: {"prompt": p, "response": r} for key, p, r in zip(meta.keys, prompts, responses)}

    def _read_prompt_rows(self, meta: KVBatchMeta) -> dict[str, list]:
        wanted = ["prompts", *(f for f in ROW_FIELDS if f in meta.fields)]
        td = self.kv.kv_batch_get(meta.keys, meta.partition_id, select_fields=wanted)
        rows = {"prompts": rows_of(td, "prompts")}
        for name in wanted[1:]:
            rows[name] = td.get(name).tolist()
        return rows

    def _greedy_baselines(self, greedy, prompts, rows: dict[str, list]) -> tuple[list[float], dict[int, str]]:
        """Scores of the greedy responses, one per prompt (ReMax's baseline), from the same reward manager.

        Returns:
            ``(scores, errors)``: one score per prompt, and ``{prompt_index: error}`` for the prompts
            whose greedy response could not be scored.
        """
        results = self._score_generations(greedy, prompts, rows)
        if results and results[0] is None:
            raise ValueError(
                "a greedy reward baseline needs the rollout's reward manager and the prompts' data_source; "
                "choose an estimator without one (e.g. grpo)."
            )
        scores, errors = [0.0] * len(prompts), {}
        for gen, result in zip(greedy, results):
            scores[gen.prompt_index] = result["score"]
            if result.get("error"):
                errors[gen.prompt_index] = f"greedy baseline: {result['error']}"
        return scores, errors

    def _score_generations(self, generations, prompts, rows: dict[str, list]) -> list[dict | None]:
        """Reward-manager results per generation: score, acc and error (None without a manager)."""
        if self.reward_manager is None or "data_source" not in rows:
            return [None] * len(generations)
        from verl_lite.reward import RewardItem

        texts = self.tokenizer.batch_decode([g.response_ids for g in generations], skip_special_tokens=True)
        items = []
        for gen, text in zip(generations, texts):
            i = gen.prompt_index
            items.append(
                RewardItem(
                    data_source=rows["data_source"][i],
                    prompt=rows.get("raw_prompt", [""] * len(prompts))[i],
                    response=text,
                    ground_truth=rows["ground_truth"][i],
                    extra_info=rows.get("extra_info", [{}] * len(prompts))[i] or {},
                    response_length=int(gen.response_ids.numel()),
                    max_response_length=self.config.rollout.response_length,
                    row={k: v[i] for k, v in rows.items()},
                )
            )
        results = []
        for result in self.reward_manager(items):
            score = 0.0 if result.score is None else float(result.score)
            acc = float(result.extra.get("acc", score > 0)) if result.extra else float(score > 0)
            # other numeric fields of the scorer or manager (e.g. DAPO's overlong) become step metrics
            numeric = {
                k: float(v)
                for k, v in result.extra.items()
                if k != "acc" and isinstance(v, (int, float)) and not isinstance(v, bool)
            }
            results.append(
                {
                    "score": score,
                    "acc": acc,
                    "error": result.error,
                    "pred": result.extra.get("pred"),
                    "reward_extra": numeric,
                }
            )
        return results

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def update_weights(self, version: int) -> dict[str, float]:
        """Send the actor's weights (with LoRA its adapters) through the checkpoint engine; load them here when colocated."""
        handle = self.sync.send_weights(self.actor.weights_to_sync(), version)
        if self.rollout is not None:
            self._wake_rollout()
            self.rollout.load_weights(self.sync.receive_weights(handle, version))
            self.rollout.weight_version = version
        return {"update_weights/bytes": float(self.sync.bytes_sent)}

    @register(dispatch_mode=Dispatch.RANK_ZERO)
    def send_weights(self, version: int) -> Any:
        """Training side of a cross-process sync: every actor rank gathers, rank 0 returns the handle."""
        return self.sync.send_weights(self.actor.weights_to_sync(), version)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def receive_weights(self, handle: Any, version: int) -> int:
        """Rollout side of a cross-process sync: load the weights behind ``handle``; returns the version."""
        self.rollout.load_weights(self.sync.receive_weights(handle, version))
        self.rollout.weight_version = version
        return version

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def weight_version(self) -> int:
        """The weight version (global step) the rollout replica serves."""
        return self.rollout.weight_version if self.rollout is not None else -1

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def rollout_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Logits of the rollout model (for checking that a weight sync arrived)."""
        return self.rollout.logits(input_ids, attention_mask)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def actor_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Logits of the actor model on full sequences."""
        with torch.no_grad():
            self.actor.model.eval()
            return self.actor.forward({"input_ids": input_ids, "attention_mask": attention_mask}).cpu()

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


__all__ = ["ActorRolloutRefWorker", "rollout_probs_diff_mean"]
