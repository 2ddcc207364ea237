"""Data-parallel workers of supervised training: a shared step loop, and the SFT (next-token) worker.

The controller sends each step's global mini-batch as one right-padded TensorDict; DP_COMPUTE_DATA
gives every rank an equal slice. A rank cuts its slice into micro-batches (gradient accumulation; by
rows, or by a token budget with ``data.use_dynamic_bsz``) and divides its summed loss by the *global*
count of loss units (target tokens, or pairs), all-reduced over ranks, times ``dp_size`` because the
FSDP reduce-scatter averages gradients over ranks. The update is therefore the token-mean over the
whole global mini-batch, whatever the DP size or the micro-batching.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from tensordict import TensorDict

from verl_lite.single_controller import Dispatch, Worker, register
from verl_lite.trainer.sft.config import SFTConfig
from verl_lite.trainer.sft.losses import IGNORE_INDEX, num_targets, sum_token_nll
from verl_lite.utils.config import from_config
from verl_lite.workers.engine import get_engine
from verl_lite.workers.sequences import split_micro_batches

MicroBatch = dict[str, torch.Tensor]


class SupervisedWorker(Worker):
    """Owns one engine shard; subclasses say what a loss unit is and how a micro-batch is scored."""

    config_cls: type = SFTConfig
    model_kind: str = "causal_lm"

    def __init__(self, config: Any):
        super().__init__()
        self.config = from_config(self.config_cls, config)
        self.engine = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Load the tokenizer and build the model, optimizer and schedule on the configured engine."""
        from transformers import AutoTokenizer

        cfg = self.config
        torch.set_num_threads(1)  # ranks share the CPU cores; one thread each avoids oversubscription
        self.tokenizer = AutoTokenizer.from_pretrained(cfg.model.tokenizer_path or cfg.model.path)
        self.engine = get_engine(cfg.engine.name)(cfg.model, cfg.optim, cfg.engine, kind=self.model_kind)

    # ---- hooks ----------------------------------------------------------------------------------
    def micro_batch(self, rows: TensorDict) -> MicroBatch:
        """Model inputs of one micro-batch, trimmed to its own longest row."""
        width = max(2, int(rows["attention_mask"].sum(dim=1).max()))
        return {k: v[:, :width] for k, v in rows.items() if v.dim() == 2}

    def count_units(self, mb: MicroBatch) -> int:
        """Loss units (the normaliser's terms) in ``mb``: target tokens."""
        return num_targets(mb["labels"])

    def loss_sums(self, output: torch.Tensor, mb: MicroBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Summed loss of ``mb`` and summed metrics (each later divided by the global unit count)."""
        nll, _ = sum_token_nll(output, mb["labels"])
        return nll, {"loss": nll.detach()}

    # ---- steps ----------------------------------------------------------------------------------
    def _micro_batches(self, batch: TensorDict) -> list[MicroBatch]:
        size = self.config.data.micro_batch_size_per_gpu
        n = batch.batch_size[0]
        return [self.micro_batch(batch[i : i + size]) for i in range(0, n, size)]

    def _all_reduce(self, values: list[float]) -> list[float]:
        tensor = torch.tensor(values, dtype=torch.float64, device=self.engine.device)
        dist.all_reduce(tensor)
        return tensor.tolist()

    @register(dispatch_mode=Dispatch.DP_COMPUTE_DATA)
    def train_step(self, batch: TensorDict) -> dict[str, float]:
        """One optimizer step on this rank's slice of the global mini-batch; returns global metrics."""
        micro = self._micro_batches(batch)
        total, num_micro = self._all_reduce(
            [float(sum(self.count_units(mb) for mb in micro)), float(len(micro))]
        )
        total = max(total, 1.0)
        scale = dist.get_world_size() / total

        def loss_fn(output: torch.Tensor, mb: MicroBatch):
            loss_sum, sums = self.loss_sums(output, mb)
            return loss_sum * scale, {k: float(v) for k, v in sums.items()}

        sums: dict[str, float] = {}
        for mb in micro:
            for k, v in self.engine.forward_backward(mb, loss_fn).items():
                sums[k] = sums.get(k, 0.0) + v
        metrics = dict(zip(sums, (v / total for v in self._all_reduce(list(sums.values())))))
        metrics.update(self.engine.optimizer_step())
        self.engine.lr_scheduler_step()
        metrics["num_units"] = total
        metrics["num_micro_batches"] = num_micro  # summed over ranks, idle ones included
        return metrics

    @register(dispatch_mode=Dispatch.DP_COMPUTE_DATA)
    @torch.no_grad()
    def eval_step(self, batch: TensorDict) -> dict[str, float]:
        """Global metric sums and unit count of one validation batch (summed over ranks)."""
        self.engine.model.eval()
        sums: dict[str, float] = {}
        count = 0
        for mb in self._micro_batches(batch):
            count += self.count_units(mb)
            _, terms = self.loss_sums(self.engine.forward(mb), mb)
            for k, v in terms.items():
                sums[k] = sums.get(k, 0.0) + float(v)
        names = sorted(sums)
        reduced = self._all_reduce([float(count), *(sums[k] for k in names)])
        return {"num_units": reduced[0], **dict(zip(names, reduced[1:]))}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, path: str) -> None:
        """Sharded model, optimizer, schedule and RNG state under ``path``."""
        self.engine.save_checkpoint(path)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, path: str) -> None:
        """Restore what :meth:`save_checkpoint` wrote under ``path``."""
        self.engine.load_checkpoint(path)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def export_hf(self, path: str) -> None:
        """A Hugging Face folder (weights, config, tokenizer) under ``path``."""
        self.engine.export_hf(path, self.tokenizer)


class SFTWorker(SupervisedWorker):
    """Next-token cross-entropy on target tokens (every assistant turn, or every token in pre-training mode)."""

    def _micro_batches(self, batch: TensorDict) -> list[MicroBatch]:
        """Rows per micro-batch, or with ``data.use_dynamic_bsz`` consecutive rows up to the token budget."""
        data = self.config.data
        if not data.use_dynamic_bsz:
            return super()._micro_batches(batch)
        lengths = batch["attention_mask"].sum(dim=1).tolist()
        cuts = split_micro_batches(lengths, max_token_len=data.max_token_len_per_gpu)
        micro = [self.micro_batch(batch[cut[0] : cut[-1] + 1]) for cut in cuts]
        # FSDP gathers each layer's parameters from every rank in the forward, so all ranks must run as
        # many micro-batches: the ones short of the most run copies whose targets are all masked (no loss)
        most = torch.tensor(len(micro), device=self.engine.device)
        dist.all_reduce(most, op=dist.ReduceOp.MAX)
        idle = {**micro[0], "labels": torch.full_like(micro[0]["labels"], IGNORE_INDEX)}
        return micro + [idle] * (int(most) - len(micro))
