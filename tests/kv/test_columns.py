"""Rows survive the trip TensorDict -> per-unit columns -> TensorDict bit-exactly (no Ray needed)."""

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from verl_lite.kv.batches import Source, assemble_field, build_tensordict, columns_of
from verl_lite.kv.columns import row_nbytes, take_rows
from verl_lite.kv.errors import KVSchemaError
from verl_lite.protocol import make_batch, to_jagged


def round_trip(td: TensorDict, unit_ids: list[int], num_units: int, padded: bool = False) -> TensorDict:
    """Split like a put, then assemble every field back like a get."""
    n = td.batch_size[0]
    columns, unit_ids = columns_of(td), np.array(unit_ids)
    parts = []
    for unit in range(num_units):
        positions = np.flatnonzero(unit_ids == unit)
        if len(positions):
            parts.append(
                (unit, positions, {name: take_rows(col, positions) for name, col in columns.items()})
            )
    out = {}
    for name in td.keys():
        sources = [Source(cols[name], np.arange(len(pos)), pos) for _, pos, cols in parts]
        out.update(assemble_field(name, n, sources, padded=padded))
    return build_tensordict(n, out)


def test_dense_jagged_bf16_and_python_rows_round_trip_through_scattered_units():
    td = make_batch(
        {
            "ids": torch.arange(12, dtype=torch.int64).view(4, 3),
            "bf16": torch.randn(4, 2).to(torch.bfloat16),
            "tokens": to_jagged([torch.arange(i + 1) for i in range(4)]),
            "feats": to_jagged([torch.full((i + 1, 2), float(i)) for i in range(4)]),  # trailing dim
            "uid": ["a", "b", "c", "d"],
        }
    )
    back = round_trip(td, unit_ids=[1, 0, 1, 0], num_units=2)
    assert torch.equal(back["ids"], td["ids"])
    assert back["bf16"].dtype == torch.bfloat16 and torch.equal(back["bf16"], td["bf16"])
    for name in ("tokens", "feats"):
        assert torch.equal(back[name].offsets(), td[name].offsets())
        assert torch.equal(back[name].values(), td[name].values())
    assert back["uid"].tolist() == ["a", "b", "c", "d"]


def test_padded_assembly_right_pads_and_returns_the_matching_mask():
    td = TensorDict({"r": to_jagged([torch.tensor([5, 6, 7]), torch.tensor([8])])}, batch_size=[2])
    back = round_trip(td, unit_ids=[0, 1], num_units=2, padded=True)
    assert back["r"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert back["r_pad_mask"].tolist() == [[True, True, True], [True, False, False]]


def test_contiguous_rows_are_sent_as_views_and_row_bytes_count_real_tokens():
    ids = torch.arange(8, dtype=torch.int64).view(4, 2)
    column = take_rows(columns_of(TensorDict({"ids": ids}, [4]))["ids"], np.arange(4))
    assert np.shares_memory(column[1], ids.numpy())  # no copy when nothing moves
    jag = columns_of(TensorDict({"t": to_jagged([torch.ones(3), torch.ones(1)])}, [2]))["t"]
    assert row_nbytes(jag).tolist() == [12, 4]  # float32 tokens, unpadded


def test_rows_of_one_field_with_different_dtypes_are_rejected_on_assembly():
    a = columns_of(TensorDict({"x": torch.zeros(2, dtype=torch.float32)}, [2]))["x"]
    b = columns_of(TensorDict({"x": torch.zeros(2, dtype=torch.float64)}, [2]))["x"]
    sources = [Source(a, np.arange(2), np.array([0, 1])), Source(b, np.arange(2), np.array([2, 3]))]
    with pytest.raises(KVSchemaError, match=r"rows of field 'x' disagree \(float32 rows .* vs float64 rows"):
        assemble_field("x", 4, sources)
