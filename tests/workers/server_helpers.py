"""Shared pieces of the rollout-server tests: prompts, a teacher-forced reference and perturbed weights."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import torch

from verl_lite.workers.config import SamplingConfig
from verl_lite.workers.rollout import RolloutServer

TINY_MODEL = str(Path(__file__).resolve().parents[2] / "verl_lite" / "assets" / "tiny_model")
EOS, PAD = 1, 0
# Distinct prompts of different lengths: each caller must get the continuation of its own prompt.
PROMPTS = [[40, 41, 42], [50, 51], [60, 61, 62, 63, 64], [70], [80, 81, 82, 83], [90, 91]]
GREEDY = SamplingConfig(n=1, temperature=0.0, do_sample=False)
SAMPLED = SamplingConfig(n=1, temperature=0.7)


async def generate_all(server: RolloutServer, prompts, sampling, max_tokens: int, tag: str = "r"):
    """One concurrent ``generate`` per prompt, outputs in prompt order."""
    return await asyncio.gather(
        *[server.generate(f"{tag}{i}", p, sampling, max_tokens) for i, p in enumerate(prompts)]
    )


@torch.no_grad()
def teacher_forced_log_probs(
    model, prompt: list[int], response: list[int], temperature: float
) -> torch.Tensor:
    """(len(response),) log-probs of ``response`` after ``prompt`` from one unpadded forward of ``model``."""
    sequence = torch.tensor([prompt + response])
    logits = model(sequence).logits[0, len(prompt) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1)


def perturbed_state(model, seed: int = 0, scale: float = 0.05) -> dict[str, torch.Tensor]:
    """``model``'s weights plus seeded Gaussian noise: weights that change what the model samples."""
    generator = torch.Generator().manual_seed(seed)
    by_storage: dict[int, torch.Tensor] = {}  # tied weights (lm_head = embed_tokens) stay one tensor
    state = {}
    for name, t in model.state_dict().items():
        if t.data_ptr() not in by_storage:
            noise = torch.randn(t.shape, generator=generator) * t.detach().float().std().clamp(min=1e-3)
            by_storage[t.data_ptr()] = t.detach() + scale * noise
        state[name] = by_storage[t.data_ptr()]
    return state


@contextlib.contextmanager
def eos_never_sampled(server: RolloutServer):
    """Serve with the pad id as EOS: greedy decoding of the tiny model never emits it, so it runs to max_tokens."""
    kept, server.eos_token_ids = server.eos_token_ids, [PAD]
    try:
        yield
    finally:
        server.eos_token_ids = kept
