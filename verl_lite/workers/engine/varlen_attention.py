"""Attention over packed rows that never crosses a row boundary, registered with transformers.

A packed micro-batch is one sequence ``(1, total_tokens)`` holding several rows back to back; the
boundaries travel as ``cu_seq_lens_q`` / ``cu_seq_lens_k`` (cumulative row lengths, flash-attn's
varlen convention), which transformers hands from the model's forward to every attention call.

* With flash-attn installed on a GPU and a bf16/fp16 forward the engine loads the model with
  ``flash_attention_2``, whose varlen kernel reads those boundaries itself.
* Everywhere else it loads ``varlen_sdpa`` (this module): causal SDPA row by row. Each row is
  then computed exactly as if it were alone and unpadded, and the cost is the sum of the rows'
  squared lengths, not the square of the packed length.

Without ``cu_seq_lens_q`` (a padded or single-row call) ``varlen_sdpa`` is plain ``sdpa``.
"""

from __future__ import annotations

import torch

VARLEN_SDPA = "varlen_sdpa"
FLASH_DTYPES = (torch.float16, torch.bfloat16)


def varlen_sdpa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    cu_seq_lens_q: torch.Tensor | None = None,
    cu_seq_lens_k: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Causal attention of each packed row on its own.

    Args:
        query: (1, heads, total_tokens, head_dim); key, value: (1, kv_heads, total_tokens, head_dim).
        cu_seq_lens_q: (rows + 1,) offsets of the rows in the packed sequence (``[0, l0, l0 + l1, ...]``).

    Returns:
        ``(output, None)`` with output (1, total_tokens, heads, head_dim), as transformers expects.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if cu_seq_lens_q is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    if query.shape[0] != 1:
        raise ValueError(f"packed attention expects one packed sequence, got a batch of {query.shape[0]}.")
    kwargs.pop("is_causal", None)
    offsets = cu_seq_lens_q.tolist()  # one host sync per layer; the rows' lengths decide the slices
    outputs = []
    for start, end in zip(offsets[:-1], offsets[1:]):
        out, _ = sdpa_attention_forward(
            module,
            query[:, :, start:end],
            key[:, :, start:end],
            value[:, :, start:end],
            None,
            is_causal=True,
            **kwargs,
        )
        outputs.append(out)
    return torch.cat(outputs, dim=1), None


def _varlen_sdpa_mask(*args, attention_mask: torch.Tensor | None = None, **kwargs):
    """No mask for packed forwards (the row offsets are the mask); the sdpa mask for padded ones."""
    from transformers.masking_utils import sdpa_mask

    if attention_mask is None:
        return None
    return sdpa_mask(*args, attention_mask=attention_mask, **kwargs)


def register_varlen_attention() -> None:
    """Make ``attn_implementation="varlen_sdpa"`` loadable (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(VARLEN_SDPA, varlen_sdpa_attention)
    AttentionMaskInterface.register(VARLEN_SDPA, _varlen_sdpa_mask)


def packed_attention_implementation(
    device: torch.device, compute_dtype: torch.dtype, flash_attn_available: bool | None = None
) -> str:
    """``flash_attention_2`` where its kernel runs, else ``varlen_sdpa`` (registered here).

    flash-attn's kernels take only float16 / bfloat16, and transformers feeds them the dtype of the
    model's weights: a float32 forward (``engine.param_dtype=float32``) would fail inside the first
    layer, so it gets ``varlen_sdpa`` too.

    Args:
        device: where the forward runs.
        compute_dtype: dtype of the forward's weights (the mixed-precision ``param_dtype`` on GPU).
        flash_attn_available: whether flash-attn 2 imports and runs here (default: transformers' check).
    """
    if flash_attn_available is None:
        from transformers.utils import is_flash_attn_2_available

        flash_attn_available = is_flash_attn_2_available()
    if device.type == "cuda" and compute_dtype in FLASH_DTYPES and flash_attn_available:
        return "flash_attention_2"
    register_varlen_attention()
    return VARLEN_SDPA
