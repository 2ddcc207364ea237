"""agg_loss: the five modes and their micro-batch / data-parallel invariance."""

import pytest
import torch

from verl_lite.algorithms import LOSS_AGG_MODES, agg_loss

MODES = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


def test_agg_modes_hand_computed():
    # L = [[1, 2, 3], [4, 5, 6]], M = [[1, 1, 0], [1, 0, 0]]: valid tokens 1, 2 | 4 (N = 3, S = 2, T = 3).
    loss_mat = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    expected = {
        "token-mean": 7 / 3,  # (1 + 2 + 4) / 3
        "token-sum": 7.0,  # 1 + 2 + 4
        "seq-mean-token-sum": 3.5,  # (3 + 4) / 2
        "seq-mean-token-mean": 2.75,  # (3/2 + 4/1) / 2
        "seq-mean-token-sum-norm": 7 / 6,  # 7 / (S * T) = 7 / (2 * 3)
    }
    assert sorted(expected) == sorted(MODES) and set(MODES) <= set(LOSS_AGG_MODES.names())
    for mode, value in expected.items():
        assert agg_loss(loss_mat, mask, mode).item() == pytest.approx(value), mode


def _split(tensor, parts):
    return list(torch.chunk(tensor, parts, dim=0))


@pytest.mark.parametrize("mode", MODES)
def test_agg_loss_micro_batches_and_dp_ranks_add_up_to_full_batch(mode):
    # 8 rows (two with an empty mask); rank r gets rows [4r, 4r + 4), split in 1, 2 or 4 micro-batches.
    # Convention: sum over micro-batches on a rank, then mean over ranks (the DP all-reduce) == full.
    gen = torch.Generator().manual_seed(0)
    loss_mat = torch.randn(8, 5, generator=gen)
    mask = (torch.rand(8, 5, generator=gen) > 0.4).float()
    mask[2] = 0.0
    mask[7] = 0.0
    full = agg_loss(loss_mat, mask, mode)
    counts = {"global_num_tokens": mask.sum(), "global_num_seqs": (mask.sum(-1) > 0).sum()}
    for dp_size in (1, 2):
        for n_micro in (1, 2, 4):
            rank_totals = []
            for rank_loss, rank_mask in zip(_split(loss_mat, dp_size), _split(mask, dp_size)):
                micro = zip(_split(rank_loss, n_micro), _split(rank_mask, n_micro))
                rank_totals.append(sum(agg_loss(lm, mm, mode, dp_size=dp_size, **counts) for lm, mm in micro))
            torch.testing.assert_close(
                sum(rank_totals) / dp_size, full, msg=f"{mode} dp={dp_size} mb={n_micro}"
            )


def test_agg_loss_without_global_counts_uses_local_counts():
    # token-mean of one micro-batch alone: row [1, 3] -> (1 + 3) / 2 = 2 (TRL's bnpo behaviour).
    loss_mat = torch.tensor([[1.0, 3.0], [10.0, 10.0]])
    mask = torch.ones(2, 2)
    assert agg_loss(loss_mat[:1], mask[:1], "token-mean").item() == 2.0
    # With the global count (4 tokens) the same micro-batch contributes its share: 4 / 4 = 1.
    assert agg_loss(loss_mat[:1], mask[:1], "token-mean", global_num_tokens=4).item() == 1.0


def test_agg_loss_dp_requires_global_counts():
    loss_mat, mask = torch.ones(2, 2), torch.ones(2, 2)
    with pytest.raises(ValueError, match="global_num_tokens"):
        agg_loss(loss_mat, mask, "token-mean", dp_size=2)
    with pytest.raises(ValueError, match="global_num_seqs"):
        agg_loss(loss_mat, mask, "seq-mean-token-mean", dp_size=2)
    # token-sum needs no count: each rank returns dp_size * its sum (2 * 4 = 8).
    assert agg_loss(loss_mat, mask, "token-sum", dp_size=2).item() == 8.0


def test_agg_loss_norm_length_and_empty_mask():
    # Dr. GRPO constant: sum 6 / (S = 1 * norm_length 4) = 1.5, independent of the padded width 3.
    loss_mat = torch.tensor([[1.0, 2.0, 3.0]])
    assert agg_loss(loss_mat, torch.ones(1, 3), "seq-mean-token-sum-norm", norm_length=4).item() == 1.5
    # An all-zero mask (padding-only micro-batch) gives 0 with a finite gradient, even over inf.
    garbage = torch.tensor([[float("inf"), 1.0]], requires_grad=True)
    for mode in MODES:
        value = agg_loss(garbage, torch.zeros(1, 2), mode)
        value.backward()
        assert value.item() == 0.0 and torch.isfinite(garbage.grad).all(), mode
