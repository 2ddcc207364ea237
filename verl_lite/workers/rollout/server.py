"""What a rollout server returns for one generation request."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TokenOutput:
    """The sampled continuation of one request, with the log-probs and weight version that produced it."""

    # Sampled ids (ending with EOS when finish_reason == "stop").
    token_ids: list[int]
    # Log-prob of each sampled id (same sampling-temperature convention as the batch rollout).
    log_probs: list[float]
    # "stop" | "length" | "abort".
    finish_reason: str
    # Version of the weights that produced them (-1 before any sync).
    weight_version: int
