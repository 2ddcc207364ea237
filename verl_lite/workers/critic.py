"""The value worker: the LM body with a scalar head, scoring states and learning returns."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from verl_lite.algorithms import compute_value_loss, masked_mean
from verl_lite.kv import KVBatchMeta, get_kv_client
from verl_lite.single_controller import Dispatch, Execute, Worker, make_nd_dispatch, register
from verl_lite.trajectory import read_columns, write_columns
from verl_lite.utils.config import from_config
from verl_lite.utils.metrics import Metric, means, reduce_metrics
from verl_lite.workers.batching import RowBatch, update_passes
from verl_lite.workers.config import CriticWorkerConfig
from verl_lite.workers.engine import HF_CONFIG_DIR, get_engine
from verl_lite.workers.sequences import response_values, unpad_rows


class CriticWorker(Worker):
    """Computes ``values`` for trajectories in the KV store and fits them to ``returns``."""

    def __init__(self, config: Any):
        super().__init__()
        self.config = from_config(CriticWorkerConfig, config)
        self.engine = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Build the value model (scalar head on the LM body) on the configured engine."""
        from transformers import AutoTokenizer

        cfg = self.config
        self.tokenizer = AutoTokenizer.from_pretrained(cfg.model.tokenizer_path or cfg.model.path)
        self.pad_token_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.engine = get_engine(cfg.engine.name)(cfg.model, cfg.critic.optim, cfg.engine, kind="value")
        self.register_mesh("critic", dp_rank=self.rank, is_collect=True)
        self.kv = get_kv_client()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, execute_mode=Execute.ALL)
    def save_checkpoint(self, path: str) -> None:
        """Sharded checkpoint of the value model, optimizer, scheduler and RNG (and tokenizer) under ``path``."""
        self.engine.save_checkpoint(path)
        if self.rank == 0:
            self.tokenizer.save_pretrained(os.path.join(path, HF_CONFIG_DIR))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, path: str) -> None:
        """Restore the value model from ``save_checkpoint``'s folder."""
        self.engine.load_checkpoint(path)

    def _read(self, meta: KVBatchMeta, fields: list[str]) -> RowBatch:
        return RowBatch(read_columns(self.kv, meta, fields), self.pad_token_id)

    @register(dispatch_mode=make_nd_dispatch("critic"))
    @torch.no_grad()
    def compute_values(self, meta: KVBatchMeta) -> KVBatchMeta:
        """Write ``values`` (the value of the state before each response token) for ``meta``'s rows."""
        cfg = self.config
        budget = cfg.log_prob_max_token_len_per_gpu if cfg.log_prob_use_dynamic_bsz else None
        self.engine.model.eval()
        batch = self._read(meta, ["prompts", "responses"])
        values = score_values(batch, self.engine.forward, cfg.log_prob_micro_batch_size_per_gpu, budget)
        write_columns(self.kv, meta.keys, meta.partition_id, {"values": values})
        return meta.with_fields(["values"])

    @register(dispatch_mode=make_nd_dispatch("critic"))
    def update_critic(self, meta: KVBatchMeta) -> dict[str, Metric]:
        """ppo_epochs x mini-batches of the clipped value loss; returns mean ``critic/*`` metrics."""
        cfg = self.config.critic
        masked = ["response_mask"] if "response_mask" in meta.fields else []
        batch = self._read(meta, ["prompts", "responses", *masked, "values", "returns"])
        dp_size = dist.get_world_size()
        history = []
        for micro, agg in update_passes(batch, cfg, meta, dp_size):
            metrics = [self.engine.forward_backward(mb, self._value_loss(agg)) for mb in micro]
            step_metrics = reduce_metrics([means(metrics)])
            step_metrics["critic/vf_loss"] = sum(m["critic/vf_loss"] for m in metrics) / dp_size
            step_metrics.update({f"critic/{k}": v for k, v in self.engine.optimizer_step().items()})
            history.append(step_metrics)
        self.engine.lr_scheduler_step()  # once per training step, however many optimizer steps it made
        return means(history)

    def _value_loss(self, agg: dict):
        cfg = self.config.critic

        def compute(output: torch.Tensor, mb: dict[str, torch.Tensor]):
            mask = mb["response_mask"].float()
            vpreds = response_values(output, mask.shape[1])
            loss, metrics = compute_value_loss(
                vpreds, mb["returns"], mb["values"], mask, cfg.cliprange_value, cfg.loss_agg_mode, **agg
            )
            return loss, {
                "critic/vf_loss": float(loss.detach()),
                "critic/vf_clipfrac": float(metrics["vf_clipfrac"]),
                "critic/vpred_mean": float(masked_mean(vpreds.detach(), mask)),
            }

        return compute


@torch.no_grad()
def score_values(batch: RowBatch, forward: Callable, size: int, budget: int | None) -> torch.Tensor:
    """Every row's response values (jagged), ``forward(micro_batch)`` giving (batch, columns, 1) values,
    ``size`` rows or ``budget`` tokens per forward (the critic's, or an actor's value head)."""
    rows = []
    for mb in batch.micro_batches(list(range(len(batch))), size, budget):
        rows.extend(response_values(forward(mb), mb["response_mask"].shape[1]).cpu())
    width = max(r.numel() for r in rows)
    padded = torch.stack([torch.nn.functional.pad(r, (0, width - r.numel())) for r in rows])
    return unpad_rows(padded, batch.response_lengths())
