"""Reduce a per-token loss matrix to the scalar that is back-propagated (``agg_loss``).

Modes (the ``loss_agg_mode`` config key). With L the per-token loss, M the 0/1 mask, N the
number of valid tokens, S the number of sequences with at least one valid token, and T the
normalising length (``norm_length``, default: the padded response length):

* ``token-mean``: sum(L*M) / N. TRL's ``dapo``; TRL's ``bnpo`` is this mode with local counts.
* ``token-sum``: sum(L*M).
* ``seq-mean-token-sum``: sum_i sum_t (L*M)_it / S.
* ``seq-mean-token-mean``: sum_i [sum_t (L*M)_it / sum_t M_it] / S. TRL's ``grpo``.
* ``seq-mean-token-sum-norm``: sum(L*M) / (S * T). TRL's ``dr_grpo``.

Micro-batching and data parallelism (the convention every worker relies on):

* Pass ``global_num_tokens`` (N) and/or ``global_num_seqs`` (S) counted over the whole
  mini-batch, i.e. over every micro-batch on every data-parallel rank of one optimizer step.
  Each call then returns ``dp_size`` times its own *share* of the full-batch loss.
* Gradient accumulation sums micro-batch losses (no division by the number of micro-batches),
  and the data-parallel all-reduce *averages* over ranks (as DDP and FSDP do). The factor
  ``dp_size`` cancels that average, so: sum over micro-batches, then mean over ranks, equals the
  full-batch value exactly. With ``dp_size=1`` the plain sum over micro-batches equals it.
* Without global counts the local counts of this call are used (the result is the loss of this
  micro-batch alone). ``dp_size > 1`` then raises, because averaging local means is not the
  full-batch value. ``token-sum`` needs no count, so it accepts ``dp_size`` on its own.

Sequences must not be split across micro-batches (rows are the unit of splitting).
"""

from __future__ import annotations

from typing import Protocol

import torch

from verl_lite.utils.registry import Registry

from .token_stats import masked_sum

__all__ = ["LOSS_AGG_MODES", "LossAggModeFn", "agg_loss", "register_loss_agg_mode"]


class LossAggModeFn(Protocol):
    """Signature of a registered mode: this call's share of the full-batch loss (before dp_size)."""

    def __call__(
        self,
        loss_mat: torch.Tensor,
        loss_mask: torch.Tensor,
        num_tokens: torch.Tensor,
        num_seqs: torch.Tensor,
        norm_length: float,
    ) -> torch.Tensor: ...


LOSS_AGG_MODES: Registry[LossAggModeFn] = Registry("loss_agg_mode")


def register_loss_agg_mode(name: str, needs: tuple[str, ...] = ()):
    """Register an aggregation mode; ``needs`` names the global counts it requires when dp_size > 1."""

    def decorator(fn):
        fn.needs = needs
        return LOSS_AGG_MODES.register(name)(fn)

    return decorator


@register_loss_agg_mode("token-mean", needs=("global_num_tokens",))
def _token_mean(loss_mat, loss_mask, num_tokens, num_seqs, norm_length):
    """Share of sum(L*M) / N."""
    return masked_sum(loss_mat, loss_mask) / num_tokens.clamp(min=1e-8)


@register_loss_agg_mode("token-sum")
def _token_sum(loss_mat, loss_mask, num_tokens, num_seqs, norm_length):
    """Share of sum(L*M)."""
    return masked_sum(loss_mat, loss_mask)


@register_loss_agg_mode("seq-mean-token-sum", needs=("global_num_seqs",))
def _seq_mean_token_sum(loss_mat, loss_mask, num_tokens, num_seqs, norm_length):
    """Share of the mean over sequences of each sequence's token sum."""
    return masked_sum(loss_mat, loss_mask) / num_seqs.clamp(min=1e-8)


@register_loss_agg_mode("seq-mean-token-mean", needs=("global_num_seqs",))
def _seq_mean_token_mean(loss_mat, loss_mask, num_tokens, num_seqs, norm_length):
    """Share of the mean over sequences of each sequence's token mean."""
    seq_tokens = loss_mask.sum(-1)
    seq_means = masked_sum(loss_mat, loss_mask, dim=-1) / seq_tokens.clamp(min=1e-8)
    return seq_means.sum() / num_seqs.clamp(min=1e-8)


@register_loss_agg_mode("seq-mean-token-sum-norm", needs=("global_num_seqs",))
def _seq_mean_token_sum_norm(loss_mat, loss_mask, num_tokens, num_seqs, norm_length):
    """Share of sum(L*M) / (S * T), the Dr. GRPO constant normaliser."""
    return masked_sum(loss_mat, loss_mask) / (num_seqs.clamp(min=1e-8) * norm_length)


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    *,
    global_num_tokens: float | torch.Tensor | None = None,
    global_num_seqs: float | torch.Tensor | None = None,
    dp_size: int = 1,
    norm_length: float | None = None,
    loss_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Aggregate a per-token loss into one scalar according to ``loss_agg_mode``.

    See the module docstring for the formulas and the micro-batch / data-parallel convention.

    Args:
        loss_mat: (batch, response_len) per-token loss.
        loss_mask: (batch, response_len), 0/1; 0 marks padding and tool/observation tokens.
        loss_agg_mode: a registered mode, e.g. ``"token-mean"``.
        global_num_tokens: valid tokens in the whole mini-batch (all micro-batches, all ranks).
        global_num_seqs: sequences with at least one valid token in the whole mini-batch.
        dp_size: data-parallel world size; the result is scaled by it so that the rank average
            taken by the gradient all-reduce gives the full-batch value.
        norm_length: the constant T of ``seq-mean-token-sum-norm`` (Dr. GRPO uses the maximum
            response length of the rollout config); defaults to ``loss_mat.shape[-1]``, which
            differs between micro-batches, so callers that cut a batch must pass it.
        loss_weights: (batch, response_len) constant per-token factors of ``loss_mat`` (the off-policy
            importance weights of ``rollout_correction.py``); the counts N and S do not change.

    Returns:
        A 0-dim tensor (at least float32) that carries gradients to ``loss_mat``.
    """
    mode_fn = LOSS_AGG_MODES.get(loss_agg_mode)
    given = {"global_num_tokens": global_num_tokens, "global_num_seqs": global_num_seqs}
    if dp_size > 1:
        missing = [key for key in getattr(mode_fn, "needs", ()) if given[key] is None]
        if missing:
            raise ValueError(
                f"agg_loss(loss_agg_mode={loss_agg_mode!r}, dp_size={dp_size}) needs {missing[0]} counted "
                "over the whole mini-batch; pass it, or use dp_size=1 for a local loss."
            )
    # Low-precision (bf16) sums and counts drift past a few hundred tokens; reduce in >= float32.
    loss_mat = loss_mat.to(torch.promote_types(loss_mat.dtype, torch.float32))
    if loss_weights is not None:
        loss_mat = loss_mat * loss_weights.detach().to(loss_mat.dtype)
    mask = loss_mask.to(loss_mat.dtype)
    num_tokens = _as_tensor(global_num_tokens, mask.sum(), loss_mat)
    num_seqs = _as_tensor(global_num_seqs, (mask.sum(-1) > 0).sum(), loss_mat)
    length = float(loss_mat.shape[-1] if norm_length is None else norm_length)
    return mode_fn(loss_mat, mask, num_tokens, num_seqs, length) * dp_size


def _as_tensor(value: float | torch.Tensor | None, local: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The global count if given, else the local one, as a float tensor on ``like``'s device."""
    chosen = local if value is None else value
    return torch.as_tensor(chosen, dtype=like.dtype, device=like.device)
