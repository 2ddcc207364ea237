"""Masked statistics and entropy (verl_lite/algorithms/token_stats.py)."""

import math

import pytest
import torch

from verl_lite.algorithms import entropy_from_logits, masked_mean, masked_var, masked_whiten


def test_masked_mean_ignores_garbage_outside_the_mask():
    # Valid entries 1 and 3 -> mean 2; the nan and inf sit on padding. Per row: [2, 0 (empty row)].
    values = torch.tensor([[1.0, float("nan"), 3.0], [float("inf"), 5.0, 6.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    assert masked_mean(values, mask).item() == 2.0
    torch.testing.assert_close(masked_mean(values, mask, dim=-1), torch.tensor([2.0, 0.0]))


def test_masked_var_is_unbiased():
    # Valid [1, 2, 3]: mean 2, squared deviations 1 + 0 + 1 = 2, / (3 - 1) = 1.
    values = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    assert masked_var(values, mask).item() == 1.0
    assert masked_var(values, mask, unbiased=False).item() == pytest.approx(2 / 3)


def test_masked_whiten_standardises_valid_entries_only():
    # Valid [1, 2, 3]: mean 2, unbiased std 1 -> [-1, 0, 1]; the padding slot stays 0.
    values = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    torch.testing.assert_close(masked_whiten(values, mask), torch.tensor([[-1.0, 0.0, 1.0, 0.0]]))
    # shift_mean=False keeps the mean: [1, 2, 3].
    torch.testing.assert_close(masked_whiten(values, mask, shift_mean=False)[:, :3], values[:, :3])
    assert torch.all(masked_whiten(values, torch.zeros_like(mask)) == 0)


def test_entropy_of_uniform_and_one_hot():
    # Uniform over 8 tokens: log 8 = 2.0794. A (near) one-hot distribution: 0.
    logits = torch.stack([torch.zeros(8), torch.tensor([1e4] + [0.0] * 7)]).unsqueeze(0)
    torch.testing.assert_close(entropy_from_logits(logits), torch.tensor([[math.log(8), 0.0]]))


def test_chunked_entropy_matches_reference_and_handles_minus_inf():
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(2, 3, 50, generator=gen) * 5).requires_grad_(True)
    reference = torch.distributions.Categorical(logits=logits).entropy()
    chunked = entropy_from_logits(logits, chunk_size=7)
    torch.testing.assert_close(chunked, reference, atol=1e-5, rtol=1e-5)
    chunked.sum().backward()
    assert torch.isfinite(logits.grad).all()
    # Banned tokens (-inf) contribute nothing: [0, 0, -inf] has the entropy of [0, 0], log 2.
    banned = torch.tensor([[[0.0, 0.0, -float("inf")]]])
    torch.testing.assert_close(entropy_from_logits(banned, chunk_size=2), torch.tensor([[math.log(2)]]))
