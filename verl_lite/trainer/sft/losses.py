"""Pure-torch losses of supervised training: summed next-token NLL and last-token scalar rewards."""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


def sum_token_nll(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed next-token negative log-likelihood over target positions, and their count.

    Summing (rather than averaging) per micro-batch lets the caller divide by the target-token
    count of the whole global mini-batch, so the update does not depend on how rows are split
    into micro-batches or data-parallel ranks.

    Args:
        logits: (batch, seq_len, vocab); position ``t`` predicts token ``t + 1``.
        labels: (batch, seq_len) aligned with the input ids (HF convention), -100 where no loss.

    Returns:
        ``(nll_sum, num_targets)``: 0-dim float loss sum and 0-dim long count.
    """
    shift_logits = logits[:, :-1].reshape(-1, logits.shape[-1])
    shift_labels = labels[:, 1:].reshape(-1).to(shift_logits.device)
    nll = F.cross_entropy(shift_logits.float(), shift_labels, ignore_index=IGNORE_INDEX, reduction="sum")
    return nll, (shift_labels != IGNORE_INDEX).sum()


def num_targets(labels: torch.Tensor) -> int:
    """Positions that :func:`sum_token_nll` counts for ``labels`` (batch, seq_len): targets after the shift."""
    return int((labels[:, 1:] != IGNORE_INDEX).sum())


def last_token_rewards(values: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The scalar head's output at each row's last real token (right padding).

    Args:
        values: (batch, seq_len) or (batch, seq_len, 1) per-token scores.
        attention_mask: (batch, seq_len), 1 on real tokens, right-padded.

    Returns:
        (batch,) rewards.
    """
    if values.dim() == 3:
        values = values.squeeze(-1)
    last = attention_mask.to(values.device).long().sum(dim=1) - 1  # (batch,)
    return values.gather(1, last.clamp(min=0).unsqueeze(1)).squeeze(1)
