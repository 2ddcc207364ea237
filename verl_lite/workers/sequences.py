"""Turn stored trajectories into padded model inputs and model outputs back into per-token values.

Trajectories are stored unpadded (jagged). For a forward pass a micro-batch is laid out as
``[left-padded prompt | right-padded response]`` so every response starts at the same column
``prompt_width``; the logits at columns ``prompt_width - 1 ... prompt_width + response_width - 2``
predict the response tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from verl_lite.algorithms import entropy_from_logits
from verl_lite.protocol import to_jagged


def build_model_inputs(
    prompts: Sequence[torch.Tensor], responses: Sequence[torch.Tensor], pad_token_id: int
) -> dict[str, torch.Tensor]:
    """Pad prompts on the left and responses on the right into one batch.

    Args:
        prompts: one 1-D tensor of prompt token ids per row.
        responses: one 1-D tensor of response token ids per row.

    Returns:
        ``input_ids``, ``attention_mask``, ``position_ids`` of shape (batch, prompt_width +
        response_width), ``responses`` and ``response_mask`` of shape (batch, response_width).
    """
    batch = len(prompts)
    prompt_width = max(int(p.numel()) for p in prompts)
    response_width = max(1, max(int(r.numel()) for r in responses))
    input_ids = torch.full((batch, prompt_width + response_width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    response_mask = torch.zeros(batch, response_width, dtype=torch.long)
    for i, (prompt, response) in enumerate(zip(prompts, responses)):
        p, r = prompt.numel(), response.numel()
        input_ids[i, prompt_width - p : prompt_width] = prompt
        input_ids[i, prompt_width : prompt_width + r] = response
        attention_mask[i, prompt_width - p : prompt_width + r] = 1
        response_mask[i, :r] = 1
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "responses": input_ids[:, prompt_width:],
        "response_mask": response_mask,
    }


def response_logits(logits: torch.Tensor, response_width: int) -> torch.Tensor:
    """Slice the logits that predict the response tokens: (batch, response_width, vocab)."""
    total = logits.shape[1]
    return logits[:, total - response_width - 1 : total - 1]


def log_probs_of(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / temperature) at ``tokens``: (batch, len) from (batch, len, vocab)."""
    scaled = logits.float() / temperature if temperature != 1.0 else logits.float()
    log_z = torch.logsumexp(scaled, dim=-1)
    return scaled.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - log_z


def response_log_probs_and_entropy(
    logits: torch.Tensor,
    inputs: dict[str, torch.Tensor],
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_requires_grad: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs (and entropy) of the response tokens of a padded micro-batch.

    With ``entropy_requires_grad=False`` the entropy is computed outside autograd: a metric that is not
    in the loss then records no graph over the (batch, response, vocab) logits.
    """
    responses = inputs["responses"]
    sliced = response_logits(logits, responses.shape[1])
    log_prob = log_probs_of(sliced, responses, temperature)
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(torch.is_grad_enabled() and entropy_requires_grad):
            scaled = sliced / temperature if temperature != 1.0 else sliced
            entropy = entropy_from_logits(scaled)
    return log_prob, entropy


def response_values(values: torch.Tensor, response_width: int) -> torch.Tensor:
    """Value of the state before each response token: (batch, response_width) from (batch, seq, 1)."""
    values = values.squeeze(-1)
    total = values.shape[1]
    return values[:, total - response_width - 1 : total - 1]


def split_micro_batches(
    lengths: Sequence[int], micro_batch_size: int | None = None, max_token_len: int | None = None
) -> list[list[int]]:
    """Cut row indices into micro-batches by row count or by a token budget.

    With ``max_token_len`` rows are packed greedily in order while their total length fits (a
    longer row gets a micro-batch of its own); otherwise every ``micro_batch_size`` rows form one.
    """
    n = len(lengths)
    if max_token_len is None:
        if not micro_batch_size or micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}.")
        return [list(range(i, min(n, i + micro_batch_size))) for i in range(0, n, micro_batch_size)]
    batches, current, used = [], [], 0
    for i, length in enumerate(lengths):
        if current and used + length > max_token_len:
            batches.append(current)
            current, used = [], 0
        current.append(i)
        used += length
    if current:
        batches.append(current)
    return batches


def unpad_rows(padded: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
    """Jagged tensor of each row's first ``lengths[i]`` entries of a right-padded (batch, width) tensor."""
    return to_jagged([padded[i, : int(n)] for i, n in enumerate(lengths)])


def on_last_token(length: int, score: float, mask: Sequence[int] | None = None) -> torch.Tensor:
    """Token-level scores of one response: the sequence score on its last token, zero elsewhere.

    With a ``response_mask`` (multi-turn: 0 on tool/observation tokens) the score sits on the last
    token the model generated instead.
    """
    out = torch.zeros(length, dtype=torch.float32)
    if not length:
        return out
    last = length - 1
    if mask is not None:
        model_tokens = [i for i, m in enumerate(mask) if m]
        last = model_tokens[-1] if model_tokens else last
    out[last] = score
    return out
