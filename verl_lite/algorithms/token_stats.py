"""Statistics over padded token tensors: masked sums, means, variances, whitening and entropy.

Every function here treats positions where the mask is 0 as absent: their values never reach
the result, even when they hold ``inf`` or ``nan`` (padding is often garbage).
"""

from __future__ import annotations

import torch

__all__ = ["entropy_from_logits", "masked_mean", "masked_sum", "masked_var", "masked_whiten"]

# Vocabulary chunk used by entropy_from_logits when the vocabulary is larger than this.
DEFAULT_ENTROPY_CHUNK = 8192


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``values`` where ``mask`` is nonzero, weighted by ``mask``.

    Args:
        values: (batch, response_len) or any shape broadcastable with ``mask``.
        mask: same shape, 0/1 (or nonnegative weights).
        dim: reduce this dimension only; None sums everything.

    Returns:
        A 0-dim tensor, or ``values`` reduced along ``dim``.
    """
    weighted = torch.where(mask != 0, values * mask, torch.zeros_like(values))
    return weighted.sum() if dim is None else weighted.sum(dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``values`` over the positions where ``mask`` is nonzero; 0 where the mask is empty.

    Args:
        values: (batch, response_len).
        mask: (batch, response_len), 0/1.
        dim: None for one mean over the whole tensor; -1 for one mean per row, shape (batch,).

    Returns:
        A 0-dim tensor, or a tensor reduced along ``dim``.
    """
    count = mask.sum() if dim is None else mask.sum(dim)
    # An empty mask gives 0/tiny = 0 rather than nan, and keeps gradients finite.
    return masked_sum(values, mask, dim) / count.clamp(min=1e-8)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of ``values`` over the mask (one number for the whole tensor).

    Args:
        values: (batch, response_len).
        mask: (batch, response_len), 0/1.
        unbiased: apply Bessel's correction n / (n - 1) when n > 1.

    Returns:
        A 0-dim tensor; 0 when fewer than two positions are valid.
    """
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask)
    if unbiased:
        count = mask.sum()
        var = torch.where(count > 1, var * count / (count - 1).clamp(min=1.0), torch.zeros_like(var))
    return var


def masked_whiten(
    values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8
) -> torch.Tensor:
    """Normalise ``values`` to zero mean and unit variance over the mask (batch-wide statistics).

    Args:
        values: (batch, response_len).
        mask: (batch, response_len), 0/1.
        shift_mean: False adds the mean back, so only the scale changes.
        eps: added to the variance before the square root.

    Returns:
        (batch, response_len), zero where ``mask`` is 0. With fewer than two valid positions the
        variance is 0 and the valid entries come out as 0 (they equal the mean).
    """
    mean = masked_mean(values, mask)
    var = masked_var(values, mask, unbiased=True)
    whitened = (values - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(mask != 0, whitened, torch.zeros_like(whitened))


def entropy_from_logits(logits: torch.Tensor, chunk_size: int | None = DEFAULT_ENTROPY_CHUNK) -> torch.Tensor:
    """Entropy of the categorical distribution softmax(logits), per position.

    Uses H = log s - sum_i e_i * d_i / s with d_i = l_i - max(l), e_i = exp(d_i), s = sum_i e_i,
    which never exponentiates a positive number and never forms log(p) of a tiny p. For large
    vocabularies the sums run over vocabulary chunks, so no full (batch, response_len, vocab)
    float32 probability tensor is kept alive besides the logits themselves.

    Args:
        logits: (batch, response_len, vocab) or any shape ending in the vocabulary dimension.
        chunk_size: vocabulary chunk; None or a value >= vocab computes in one pass.

    Returns:
        (batch, response_len) entropy in nats, float32 (or float64 for float64 logits).
    """
    compute_dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    vocab = logits.shape[-1]
    # H does not depend on the shift, so the max carries no gradient.
    shift = logits.detach().amax(dim=-1, keepdim=True).to(compute_dtype)
    step = vocab if chunk_size is None or chunk_size >= vocab else chunk_size
    sum_exp = torch.zeros(logits.shape[:-1], dtype=compute_dtype, device=logits.device)
    sum_exp_shifted = torch.zeros_like(sum_exp)
    for start in range(0, vocab, step):
        # -inf logits (banned tokens) become a large finite negative number: exp() is 0 and
        # 0 * d stays 0, where 0 * -inf would be nan.
        shifted = (logits[..., start : start + step].to(compute_dtype) - shift).clamp(min=-1e4)
        exp = torch.exp(shifted)
        sum_exp = sum_exp + exp.sum(-1)
        sum_exp_shifted = sum_exp_shifted + (exp * shifted).sum(-1)
    return torch.log(sum_exp) - sum_exp_shifted / sum_exp
