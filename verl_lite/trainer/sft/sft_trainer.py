"""The supervised-training controller: cut mini-batches, dispatch steps, validate, checkpoint, export.

Used by both ``main_sft`` and ``main_rm``: the examples, their collate function and the worker
class differ; the loop does not. The controller holds the (small) tokenized data set and sends
each step's right-padded global mini-batch to the workers with ``Dispatch.DP_COMPUTE_DATA``.

Checkpoints use main_ppo's layout and helpers (``trainer/checkpoint.py``): the workers' shards in
``global_step_N/actor`` (where ``model_merger`` looks), the step and loss EMA in the trainer state,
published atomically. The mini-batches are a function of (seed, epoch), so a resumed run skips the
steps already taken and sees the same rows in the same order as an uninterrupted one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict

from verl_lite.trainer.checkpoint import CheckpointWriter, load_trainer_state, prune_checkpoints
from verl_lite.trainer.sft.config import SupervisedConfig
from verl_lite.trainer.sft.data import epoch_batches
from verl_lite.trainer.sft.losses import IGNORE_INDEX

Example = dict[str, list[int]]
Collate = Callable[[Sequence[Example], int], dict[str, torch.Tensor]]
# Checkpoint part of the trained model: main_ppo's name for the policy, which model_merger reads by default.
MODEL_PART = "actor"


@dataclass
class SupervisedData:
    """Tokenized examples and how to batch them."""

    train: Sequence[Example]
    val: Sequence[Example]
    # (examples, pad_token_id) -> right-padded tensors of equal row count
    collate: Collate
    pad_token_id: int
    # Counters reported once at the start (e.g. rows skipped because truncation removed their target).
    stats: dict[str, float]


def total_steps(config: SupervisedConfig, num_train: int) -> int:
    """Optimizer steps of the run: ``trainer.total_training_steps`` or ``total_epochs`` full passes."""
    per_epoch = num_train // config.data.train_batch_size
    if per_epoch == 0:
        raise ValueError(
            f"{num_train} training rows are fewer than data.train_batch_size={config.data.train_batch_size}."
        )
    return config.trainer.total_training_steps or config.trainer.total_epochs * per_epoch


class SupervisedTrainer:
    """Drives a worker group with ``train_step`` / ``eval_step`` / ``save_checkpoint`` / ``export_hf``."""

    def __init__(self, config: SupervisedConfig, workers: Any, data: SupervisedData, tracker: Any):
        self.config = config
        self.workers = workers
        self.data = data
        self.tracker = tracker
        self.steps = total_steps(config, len(data.train))
        self.loss_ema: float | None = None

    def fit(self, resume_path: str | None = None) -> list[dict[str, float]]:
        """Train up to ``self.steps`` optimizer steps, first restoring ``resume_path`` (a ``global_step_N``
        checkpoint) if given; returns the metrics of every step this call took."""
        history = []
        done = self.resume(resume_path)
        if not done:
            self.tracker.log({f"data/{k}": float(v) for k, v in self.data.stats.items()}, step=0)
        trainer = self.config.trainer
        for step, rows in enumerate(self._train_batches(skip=done), start=done + 1):
            start = time.perf_counter()
            metrics = self._train_step(rows)
            metrics["timing_s/step"] = time.perf_counter() - start
            if self.data.val and (
                step == self.steps or (trainer.test_freq > 0 and step % trainer.test_freq == 0)
            ):
                metrics.update(self.validate())
            if trainer.save_freq > 0 and (step % trainer.save_freq == 0 or step == self.steps):
                self.save_checkpoint(step)
            self.tracker.log(metrics, step=step)
            history.append({"step": step, **metrics})
        if trainer.export_hf:
            self.workers.export_hf(os.path.join(trainer.default_local_dir, "hf"))
        return history

    def save_checkpoint(self, step: int) -> str:
        """Workers write their shards, the controller its state; published atomically, old ones pruned."""
        trainer = self.config.trainer
        writer = CheckpointWriter(trainer.default_local_dir, step)
        self.workers.save_checkpoint(writer.part(MODEL_PART))
        writer.save_trainer_state({"global_step": step, "loss_ema": self.loss_ema})
        path = writer.publish()
        prune_checkpoints(trainer.default_local_dir, trainer.max_ckpt_to_keep)
        return path

    def resume(self, path: str | None) -> int:
        """Restore the workers and the controller from checkpoint ``path``; returns the steps it had taken
        (0, and earlier metrics of this run folder moved aside, when ``path`` is None)."""
        if path is None:
            self.tracker.archive_previous()
            return 0
        state = load_trainer_state(path)
        self.workers.load_checkpoint(os.path.join(path, MODEL_PART))
        self.loss_ema = state["loss_ema"]
        step = int(state["global_step"])
        self.tracker.rewind(step)
        print(f"resumed from {path}: continuing after step {step}", flush=True)
        return step

    def _train_batches(self, skip: int = 0):
        """The rows of each step after the first ``skip`` (which are drawn, not returned)."""
        data = self.config.data
        step, epoch = 0, 0
        while True:
            for indices in epoch_batches(
                len(self.data.train), data.train_batch_size, data.shuffle, data.seed, epoch
            ):
                if step == self.steps:
                    return
                step += 1
                if step > skip:
                    yield [self.data.train[i] for i in indices]
            epoch += 1

    def _train_step(self, rows: Sequence[Example]) -> dict[str, float]:
        out = self.workers.train_step(self._to_batch(rows, len(rows)))[0]  # identical on every rank
        metrics = {f"train/{k}": v for k, v in out.items() if k not in ("grad_norm", "lr")}
        metrics.update({"train/grad_norm": out["grad_norm"], "train/lr": out["lr"]})
        decay = self.config.trainer.loss_ema_decay
        loss = out["loss"]
        self.loss_ema = loss if self.loss_ema is None else decay * self.loss_ema + (1 - decay) * loss
        metrics["train/loss_ema"] = self.loss_ema
        return metrics

    def validate(self) -> dict[str, float]:
        """Metrics averaged over the whole validation split (``val/loss`` and friends)."""
        size = self.config.data.train_batch_size
        totals: dict[str, float] = {}
        for i in range(0, len(self.data.val), size):
            rows = list(self.data.val[i : i + size])
            dp = self.config.dp_size
            # pad to a multiple of the DP size with masked copies (they add no loss units)
            padded = rows + [_masked(rows[0])] * ((-len(rows)) % dp)
            out = self.workers.eval_step(self._to_batch(padded, len(rows)))[0]
            for k, v in out.items():
                totals[k] = totals.get(k, 0.0) + v
        units = max(totals.pop("num_units"), 1.0)
        return {f"val/{k}": v / units for k, v in totals.items()}

    def _to_batch(self, rows: Sequence[Example], num_valid: int) -> TensorDict:
        tensors = self.data.collate(rows, self.data.pad_token_id)
        valid = torch.zeros(len(rows))
        valid[:num_valid] = 1.0
        return TensorDict({**tensors, "valid": valid}, batch_size=[len(rows)])


def _masked(example: Example) -> Example:
    """A copy of ``example`` whose labels are all ignored (a padding row for validation)."""
    return {k: [IGNORE_INDEX] * len(v) if k == "labels" else v for k, v in example.items()}
