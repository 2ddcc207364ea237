"""Batch helpers keep dense, jagged and per-row python fields aligned."""

import pytest
import torch

from tests.batches import make_batch
from verl_lite import protocol
from verl_lite.protocol import to_jagged


def sample_batch(n=5):
    return make_batch(
        {
            "x": torch.arange(float(n)),
            "uid": [f"u{i}" for i in range(n)],
            "tokens": to_jagged([torch.arange(i + 1) for i in range(n)]),
        }
    )


def test_chunk_returns_exactly_n_parts_with_sizes_differing_by_at_most_one():
    parts = protocol.chunk(sample_batch(5), 3)
    assert [len(p) for p in parts] == [2, 2, 1]
    assert parts[2]["uid"].tolist() == ["u4"]
    assert [len(p) for p in protocol.chunk(sample_batch(2), 4)] == [1, 1, 0, 0]


def test_concat_restores_chunked_batch():
    batch = sample_batch(5)
    back = protocol.concat(protocol.chunk(batch, 2))
    assert back["uid"].tolist() == batch["uid"].tolist()
    assert torch.equal(back["tokens"].values(), batch["tokens"].values())
    assert torch.equal(back["tokens"].offsets(), batch["tokens"].offsets())


def test_concat_rejects_batches_with_different_fields():
    with pytest.raises(ValueError, match="different fields"):
        protocol.concat([make_batch({"x": torch.ones(2)}), make_batch({"y": torch.ones(2)})])


def test_pad_to_divisor_then_unpad_round_trips():
    batch = sample_batch(7)
    padded, pad = protocol.pad_to_divisor(batch, 3)
    assert (len(padded), pad) == (9, 2)
    assert padded["uid"].tolist()[-2:] == ["u0", "u1"]  # padding repeats the first rows
    assert protocol.unpad(padded, pad)["uid"].tolist() == batch["uid"].tolist()


def test_padded_from_jagged_pads_right_with_a_mask():
    jagged = to_jagged([torch.tensor([1, 2, 3]), torch.tensor([4])])
    padded, mask = protocol.padded_from_jagged(jagged, pad_value=0)
    assert padded.tolist() == [[1, 2, 3], [4, 0, 0]]
    assert mask.tolist() == [[True, True, True], [True, False, False]]
    assert padded[mask].tolist() == jagged.values().tolist()


def test_to_jagged_from_tensors_and_from_lists_equals_torch_nested_tensor():
    rows = [torch.tensor([1, 2, 3]), torch.tensor([], dtype=torch.long), torch.tensor([4, 5])]
    expected = torch.nested.nested_tensor(rows, layout=torch.jagged)
    for built in (to_jagged(rows), to_jagged([r.tolist() for r in rows], torch.long)):
        assert built.dtype == torch.long
        assert torch.equal(built.offsets(), expected.offsets())
        assert [r.tolist() for r in built.unbind()] == [[1, 2, 3], [], [4, 5]]
    two_d = to_jagged([torch.zeros(2, 4), torch.ones(1, 4)])  # (len, ...) rows keep their trailing dims
    assert [tuple(r.shape) for r in two_d.unbind()] == [(2, 4), (1, 4)]
    floats = to_jagged([[0.5], [1.5, 2.5]], torch.float32)
    assert floats.dtype == torch.float32 and floats.values().tolist() == [0.5, 1.5, 2.5]
    with pytest.raises(ValueError, match="at least one row"):
        to_jagged([])


def test_padded_from_jagged_refuses_to_cut_rows():
    with pytest.raises(ValueError, match="max_len=2 is shorter than the longest row \\(3\\)"):
        protocol.padded_from_jagged(to_jagged([torch.tensor([1, 2, 3])]), max_len=2)
