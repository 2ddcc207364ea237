"""Pack the rows of a padded micro-batch into one sequence, and put the outputs back in the padded layout.

Workers build micro-batches padded to ``(batch, width)`` (see ``verl_lite.workers.sequences``).
With ``use_remove_padding`` the engine drops the padding before the forward: the valid tokens of
all rows are laid end to end as ``(1, total_tokens)``, each row keeping its own position ids
(0, 1, ...), and the row offsets go to the attention (``varlen_attention``) so no row sees
another. The outputs are scattered back into the padded layout, zeros at the padding, so every
loss and log-prob function reads them exactly as it reads a padded forward's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class PackedRows:
    """A micro-batch's valid tokens end to end, and where each came from."""

    input_ids: torch.Tensor
    """(1, total_tokens) token ids of every row, back to back."""
    position_ids: torch.Tensor
    """(1, total_tokens) position of each token within its own row."""
    cu_seq_lens: torch.Tensor
    """(rows + 1,) int32 offsets of the rows: ``[0, len_0, len_0 + len_1, ...]``."""
    max_length: int
    """Longest row, in tokens."""
    valid: torch.Tensor
    """(batch, width) bool: which cells of the padded layout hold a token."""

    def attention_kwargs(self) -> dict:
        """The keyword arguments transformers passes to varlen attention (flash-attn naming)."""
        return {
            "cu_seq_lens_q": self.cu_seq_lens,
            "cu_seq_lens_k": self.cu_seq_lens,
            "max_length_q": self.max_length,
            "max_length_k": self.max_length,
        }


def pack_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> PackedRows:
    """Drop the padding of ``input_ids`` (batch, width); every row's tokens must be contiguous.

    Args:
        input_ids: (batch, width) token ids, padded on either side.
        attention_mask: (batch, width), 1 where a token is.
    """
    valid = attention_mask.bool()
    lengths = valid.sum(dim=1)
    cu_seq_lens = F.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)
    # Position within the row, counted over valid tokens only (left padding does not shift it).
    positions = (valid.long().cumsum(dim=1) - 1)[valid]
    return PackedRows(
        input_ids=input_ids[valid].unsqueeze(0),
        position_ids=positions.unsqueeze(0),
        cu_seq_lens=cu_seq_lens,
        max_length=int(lengths.max()),
        valid=valid,
    )


def packed_indices(valid: torch.Tensor, columns: slice) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the cells ``valid[:, columns]`` sit in the packed sequence.

    Returns:
        ``(index, keep)``: ``index`` (kept cells,) ascending positions in the packed sequence, and
        ``keep`` (batch, n_columns) bool, the cells of the padded sub-grid that hold a token.
    """
    flat = torch.full(valid.shape, -1, dtype=torch.long, device=valid.device)
    flat[valid] = torch.arange(int(valid.sum()), device=valid.device)
    sub = flat[:, columns]
    keep = sub >= 0
    return sub[keep], keep


def unpack_to_grid(packed: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Scatter ``packed`` (1, kept, ...) into a zero (batch, n_columns, ...) grid at ``keep``."""
    out = packed.new_zeros((*keep.shape, *packed.shape[2:]))
    out[keep] = packed[0]
    return out
