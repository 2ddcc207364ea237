"""Read a worker's rows from the KV store and cut them into padded mini- and micro-batches."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
import torch.distributed as dist
from tensordict import TensorDictBase

from verl_lite.kv import KVBatchMeta
from verl_lite.workers.config import UpdateBatchingConfig
from verl_lite.workers.sequences import build_model_inputs, split_micro_batches

# Per-token fields that are laid out like the response (right-padded to the response width).
RESPONSE_FIELDS = (
    "old_log_probs",
    "ref_log_prob",
    "rollout_log_probs",
    "rollout_is_weights",
    "advantages",
    "returns",
    "values",
    "token_level_rewards",
    "entropy",
)


def rows_of(td: TensorDictBase, key: str) -> list[torch.Tensor]:
    """The rows of a jagged (or dense) field as a list of tensors."""
    value = td.get(key)
    return list(value.unbind()) if value.is_nested else list(value)


class RowBatch:
    """The rows of one shard, unpadded, with the fields a worker read for them."""

    def __init__(self, td: TensorDictBase, pad_token_id: int):
        self.pad_token_id = pad_token_id
        self.prompts = rows_of(td, "prompts")
        self.responses = rows_of(td, "responses")
        self.extra = {k: rows_of(td, k) for k in td.keys() if k in RESPONSE_FIELDS}
        # multi-turn trajectories: 0 on tool/observation tokens, which no loss or statistic counts
        self.masks = rows_of(td, "response_mask") if "response_mask" in td.keys() else None
        if "rollout_rs_mask" in td.keys():  # off-policy rejection: out of the loss and of its token counts
            kept = rows_of(td, "rollout_rs_mask")
            self.masks = kept if self.masks is None else [m * k for m, k in zip(self.masks, kept)]

    def __len__(self) -> int:
        return len(self.prompts)

    def lengths(self) -> list[int]:
        """Prompt + response tokens per row (what a token budget counts)."""
        return [int(p.numel() + r.numel()) for p, r in zip(self.prompts, self.responses)]

    def response_lengths(self) -> list[int]:
        return [int(r.numel()) for r in self.responses]

    def padded(self, rows: Sequence[int]) -> dict[str, torch.Tensor]:
        """Model inputs for ``rows`` plus every per-token field right-padded to the response width."""
        inputs = build_model_inputs(
            [self.prompts[i] for i in rows], [self.responses[i] for i in rows], self.pad_token_id
        )
        width = inputs["response_mask"].shape[1]
        for key, values in self.extra.items():
            out = torch.zeros(len(rows), width, dtype=values[0].dtype if values else torch.float32)
            for j, i in enumerate(rows):
                out[j, : values[i].numel()] = values[i]
            inputs[key] = out
        if self.masks is not None:
            for j, i in enumerate(rows):
                inputs["response_mask"][j, : self.masks[i].numel()] *= self.masks[i].to(torch.long)
        return inputs

    def micro_batches(self, rows: Sequence[int], micro_batch_size: int, max_token_len: int | None):
        """Padded micro-batches over ``rows`` by count or token budget."""
        lengths = self.lengths()
        cuts = split_micro_batches([lengths[i] for i in rows], micro_batch_size, max_token_len)
        return [self.padded([rows[j] for j in cut]) for cut in cuts]


def mini_batches(num_rows: int, mini_batch_size: int, shuffle: bool, seed: int) -> Iterator[list[int]]:
    """Row indices of each local mini-batch (a shuffled permutation cut into equal parts)."""
    order = (
        torch.randperm(num_rows, generator=torch.Generator().manual_seed(seed))
        if shuffle
        else torch.arange(num_rows)
    )
    order = order.tolist()
    for start in range(0, num_rows, mini_batch_size):
        yield order[start : start + mini_batch_size]


def update_passes(
    batch: RowBatch, cfg: UpdateBatchingConfig, meta: KVBatchMeta, dp_size: int
) -> Iterator[tuple[list[dict[str, torch.Tensor]], dict[str, float]]]:
    """The micro-batches of each optimizer step of a PPO-style update, with the loss-aggregation counts.

    ``cfg`` (the actor's or the critic's section) gives ``ppo_epochs``, ``ppo_mini_batch_size`` (in prompts; each
    prompt brought ``meta.samples_per_prompt`` trajectories), ``shuffle`` (seeded by ``meta.global_step``
    and the epoch) and the micro-batch size or token budget. Yields one
    ``(micro_batches, agg)`` per mini-batch; ``agg`` holds the global token/sequence counts and
    ``dp_size`` that ``agg_loss`` expects.
    """
    local_mini = max(1, cfg.ppo_mini_batch_size * meta.samples_per_prompt // dp_size)
    step = meta.global_step
    budget = cfg.ppo_max_token_len_per_gpu if cfg.use_dynamic_bsz else None
    for epoch in range(cfg.ppo_epochs):
        for rows in mini_batches(len(batch), local_mini, cfg.shuffle, seed=step * 1000 + epoch):
            micro = batch.micro_batches(rows, cfg.ppo_micro_batch_size_per_gpu, budget)
            tokens, seqs = global_counts(micro)
            yield micro, {"global_num_tokens": tokens, "global_num_seqs": seqs, "dp_size": dp_size}


def global_counts(micro_batches: list[dict[str, torch.Tensor]]) -> tuple[float, float]:
    """Valid tokens and non-empty sequences of a mini-batch summed over every data-parallel rank."""
    tokens = sum(float(mb["response_mask"].sum()) for mb in micro_batches)
    seqs = sum(float((mb["response_mask"].sum(dim=1) > 0).sum()) for mb in micro_batches)
    counts = torch.tensor([tokens, seqs], dtype=torch.float64)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(counts)
    return float(counts[0]), float(counts[1])
