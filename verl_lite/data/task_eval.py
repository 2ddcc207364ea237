"""Measure a causal LM's accuracy on a ``#### <answer>`` task with batched HF ``generate`` (left padding).

Used to check the embedded tiny model and the bare GRPO loop; the RL trainer has its own validation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .scoring import compute_score

__all__ = ["encode_prompts", "evaluate_accuracy", "generate_responses"]


def encode_prompts(tokenizer: Any, prompts: Sequence[Sequence[dict[str, str]]]) -> dict[str, torch.Tensor]:
    """Left-padded ``input_ids`` / ``attention_mask`` (batch, prompt_len) of chat prompts, ready to generate."""
    texts = [
        tokenizer.apply_chat_template(list(p), tokenize=False, add_generation_prompt=True) for p in prompts
    ]
    return tokenizer(texts, padding=True, padding_side="left", add_special_tokens=False, return_tensors="pt")


@torch.no_grad()
def generate_responses(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Sequence[dict[str, str]]],
    max_new_tokens: int,
    n: int = 1,
    temperature: float = 0.0,
    batch_size: int = 64,
) -> list[list[str]]:
    """``n`` decoded responses per prompt; ``temperature=0`` is greedy (then use ``n=1``)."""
    sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    options = sampling if temperature > 0 else {"do_sample": False}
    responses: list[list[str]] = []
    for start in range(0, len(prompts), batch_size):
        batch = encode_prompts(tokenizer, prompts[start : start + batch_size])
        out = model.generate(
            **batch,
            max_new_tokens=max_new_tokens,
            num_return_sequences=n,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            **options,
        )
        texts = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
        responses.extend(texts[i : i + n] for i in range(0, len(texts), n))
    return responses


def evaluate_accuracy(
    model: Any,
    tokenizer: Any,
    rows: Sequence[dict[str, Any]],
    max_new_tokens: int,
    n: int = 1,
    temperature: float = 0.0,
    batch_size: int = 64,
) -> float:
    """Mean ``compute_score`` over ``rows`` (RL rows: ``prompt`` and ``reward_model.ground_truth``)."""
    was_training = model.training
    model.eval()
    prompts = [list(row["prompt"]) for row in rows]
    responses = generate_responses(model, tokenizer, prompts, max_new_tokens, n, temperature, batch_size)
    model.train(was_training)
    scores = [
        compute_score(text, row["reward_model"]["ground_truth"])
        for row, texts in zip(rows, responses)
        for text in texts
    ]
    return sum(scores) / len(scores)
