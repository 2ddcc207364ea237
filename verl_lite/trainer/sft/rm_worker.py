"""The reward-model worker: Bradley-Terry loss on a scalar head, exported as a sequence classifier.

The engine's ``kind="value"`` model is the LM body with a per-token scalar head
(``AutoModelForTokenClassification``, num_labels=1); the reward of a sequence is that head at its
last real token, which is exactly what ``AutoModelForSequenceClassification`` computes. The head's
bias is held at zero and its dropout switched off, so the exported sequence classifier (whose
``score`` layer has no bias) reproduces the trained rewards exactly.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tensordict import TensorDict

from verl_lite.data.preference_loss import bradley_terry_loss
from verl_lite.single_controller import Dispatch, register
from verl_lite.trainer.sft.config import RMConfig
from verl_lite.trainer.sft.losses import last_token_rewards
from verl_lite.trainer.sft.sft_worker import MicroBatch, SupervisedWorker


class RMWorker(SupervisedWorker):
    """Scores chosen and rejected sides in one forward and fits sigmoid(r_chosen - r_rejected) to 1."""

    config_cls = RMConfig
    model_kind = "value"

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        super().init_model()
        model = self.engine.model
        model.dropout.p = 0.0  # the sequence classifier has no dropout before its head
        bias = getattr(model.score, "bias", None)
        if bias is not None:
            with torch.no_grad():
                bias.zero_()
            bias.requires_grad_(False)  # no grad: AdamW and clipping skip it

    def micro_batch(self, rows: TensorDict) -> MicroBatch:
        """Chosen rows then rejected rows stacked into one (2 * pairs, width) batch."""
        width = max(
            2,
            int(rows["chosen_attention_mask"].sum(1).max()),
            int(rows["rejected_attention_mask"].sum(1).max()),
        )

        def side(name: str, pad_value: int) -> torch.Tensor:
            # the two sides were right-padded separately, to different widths
            parts = [rows[f"{s}_{name}"][:, :width] for s in ("chosen", "rejected")]
            return torch.cat([F.pad(p, (0, width - p.shape[1]), value=pad_value) for p in parts])

        return {
            "input_ids": side("input_ids", self.tokenizer.pad_token_id or 0),
            "attention_mask": side("attention_mask", 0),
            "valid": rows["valid"],
        }

    def count_units(self, mb: MicroBatch) -> int:
        """Loss units are real (not padding) pairs."""
        return int(mb["valid"].sum())

    def loss_sums(self, output: torch.Tensor, mb: MicroBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        rewards = last_token_rewards(output, mb["attention_mask"])  # (2 * pairs,)
        pairs = rewards.shape[0] // 2
        keep = mb["valid"].to(rewards.device) > 0
        chosen, rejected = rewards[:pairs][keep], rewards[pairs:][keep]
        if chosen.numel() == 0:
            zero = rewards.sum() * 0.0  # keeps the graph; every rank must report the same metric keys
            keys = ("loss", "accuracy", "margin", "reward_chosen", "reward_rejected")
            return zero, {k: zero.detach() for k in keys}
        loss, metrics = bradley_terry_loss(chosen, rejected)
        n = chosen.numel()
        return loss * n, {
            "loss": loss.detach() * n,
            "accuracy": metrics["accuracy"] * n,
            "margin": metrics["margin"] * n,
            "reward_chosen": chosen.detach().sum(),
            "reward_rejected": rejected.detach().sum(),
        }

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def export_hf(self, path: str) -> None:
        """Write an ``AutoModelForSequenceClassification`` folder (num_labels=1) with the tokenizer."""
        from transformers import AutoModelForSequenceClassification

        state = {name: tensor.detach().cpu() for name, tensor in self.engine.named_full_parameters()}
        if dist.get_rank() == 0:
            os.makedirs(path, exist_ok=True)
            config = self.engine.hf_config
            config.num_labels = 1
            config.architectures = None
            model = AutoModelForSequenceClassification.from_config(config, dtype=torch.float32)
            state.pop("score.bias", None)
            model.load_state_dict(state, strict=True)
            model.save_pretrained(path, safe_serialization=True)
            self.tokenizer.save_pretrained(path)
        dist.barrier()
