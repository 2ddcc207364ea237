"""Packing TensorDicts into numpy buffers is lossless and copies no tensor memory."""

import pickle

import torch
from tensordict import TensorDict

from tests.batches import make_batch
from verl_lite.protocol import to_jagged
from verl_lite.transport import pack, unpack


def test_pack_unpack_round_trip_is_bit_exact_for_every_field_kind():
    batch = make_batch(
        {
            "ids": torch.arange(6, dtype=torch.int64).view(3, 2),
            "bf16": torch.randn(3, 4).to(torch.bfloat16),
            "mask": torch.tensor([True, False, True]),
            "tokens": to_jagged([torch.arange(i + 1) for i in range(3)]),
            "uid": ["a", "b", "c"],
        }
    )
    batch["nested"] = TensorDict({"v": torch.ones(3, 2)}, batch_size=[3])
    batch.set_non_tensor("note", {"step": 4})
    back = unpack(pickle.loads(pickle.dumps(pack(batch))))
    assert torch.equal(back["ids"], batch["ids"])
    assert back["bf16"].dtype == torch.bfloat16 and torch.equal(back["bf16"], batch["bf16"])
    assert torch.equal(back["mask"], batch["mask"])
    assert torch.equal(back["tokens"].values(), batch["tokens"].values())
    assert torch.equal(back["tokens"].offsets(), batch["tokens"].offsets())
    assert back["uid"].tolist() == ["a", "b", "c"]
    assert torch.equal(back["nested", "v"], torch.ones(3, 2))
    assert back["note"] == {"step": 4}


def test_pack_shares_memory_with_the_tensor():
    x = torch.arange(10.0)
    packed = pack(TensorDict({"x": x}, batch_size=[10]))
    array = packed.fields["x"][1]
    x[0] = 42.0
    assert array[0] == 42.0  # a view, not a copy
    assert packed.nbytes() == 40
