"""Arrays of a few MiB travel through Ray's object store as 1 MiB pieces and come back whole."""

import gc
import pickle

import numpy as np
import torch
from tensordict import TensorDict

from verl_lite.kv.pieces import PIECE_BYTES, InPieces, in_pieces
from verl_lite.protocol import to_jagged

UP_TO = 4 << 20  # the limit on nodes with few cores; on larger ones the store sends arrays whole


def test_only_contiguous_arrays_between_one_piece_and_the_limit_are_wrapped():
    mid = np.zeros(PIECE_BYTES // 8 + 1, dtype=np.int64)
    columns = {
        "one_piece": ("dense", np.zeros(PIECE_BYTES, dtype=np.uint8), "torch.uint8"),
        "mid": ("jagged", mid, np.array([0, mid.size]), "torch.int64"),
        "too_big": ("dense", np.zeros(UP_TO + 1, dtype=np.uint8), "torch.uint8"),
        "strided": ("dense", np.zeros((2, PIECE_BYTES), dtype=np.uint8)[:, ::2], "torch.uint8"),
        "rows": ("rows", ["a", "b"]),
    }
    wrapped = in_pieces(columns, up_to=UP_TO)
    assert [type(v).__name__ for v in wrapped["mid"]] == ["str", "InPieces", "ndarray", "str"]
    for name in ("one_piece", "too_big", "strided", "rows"):
        assert all(a is b for a, b in zip(wrapped[name], columns[name], strict=True))
    assert in_pieces(columns, up_to=0) is columns  # nodes with 8 or more cores: always whole


def test_ray_returns_the_pieces_as_one_read_only_view_of_the_stored_object(ray_local):
    ray = ray_local
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 32000, size=(300, 1024), dtype=np.int64)  # 2.3 MiB: 3 pieces, the last partial
    masks = rng.integers(0, 2, size=(3 * PIECE_BYTES + 5,)).astype(bool)
    back = ray.get(
        ray.put(
            in_pieces(
                {"ids": ("dense", ids, "torch.int64"), "m": ("dense", masks, "torch.bool")}, up_to=UP_TO
            )
        )
    )
    assert back["ids"][0] == "dense" and back["ids"][2] == "torch.int64"
    for got, sent in ((back["ids"][1], ids), (back["m"][1], masks)):
        assert got.dtype == sent.dtype and got.shape == sent.shape
        assert np.array_equal(got, sent)
        # Read-only, like every array Ray maps; a copy made because pieces were apart would be writable.
        assert not got.flags.writeable
    # The view alone keeps the stored object mapped: freed, its memory would be reused by new puts.
    view = back["ids"][1]
    del back
    gc.collect()
    fillers = [ray.put(np.full(ids.shape, -1, dtype=np.int64)) for _ in range(4)]
    assert np.array_equal(view, ids)
    del fillers


def test_pieces_that_are_not_adjacent_are_copied_into_one_array():
    values = np.arange(PIECE_BYTES // 4 * 3 + 7, dtype=np.float32)
    back = pickle.loads(pickle.dumps(InPieces(values)))  # in-band: every piece is a separate bytes object
    assert back.dtype == np.float32 and np.array_equal(back, values)
    assert back.flags.writeable


def test_kv_round_trip_of_fields_of_a_few_mib_is_bit_exact(kv_client, partition):
    g = torch.Generator().manual_seed(3)
    n = 256
    lengths = torch.randint(700, 1024, (n,), generator=g).tolist()  # ~1.7 MiB of jagged int64 values
    td = TensorDict(
        {
            "input_ids": torch.randint(0, 32000, (n, 1024), generator=g),  # 2 MiB: 2 pieces
            "responses": to_jagged([torch.randint(0, 32000, (k,), generator=g) for k in lengths]),
            "old_log_probs": torch.randn(n, 1024, generator=g),  # exactly 1 MiB: whole
        },
        batch_size=[n],
    )
    keys = [f"p{i}_0_0" for i in range(n)]
    kv_client.kv_batch_put(keys, partition, fields=td)
    back = kv_client.kv_batch_get(keys, partition)
    assert torch.equal(back["input_ids"], td["input_ids"])
    assert torch.equal(back["old_log_probs"], td["old_log_probs"])
    assert torch.equal(back["responses"].offsets(), td["responses"].offsets())
    assert torch.equal(back["responses"].values(), td["responses"].values())
    order = list(range(n - 1, -1, -3))  # gathered across the pieces' boundaries
    picked = kv_client.kv_batch_get(
        [keys[i] for i in order], partition, select_fields=["input_ids", "responses"]
    )
    assert torch.equal(picked["input_ids"], td["input_ids"][order])
    for row, i in enumerate(order):
        assert torch.equal(picked["responses"][row], td["responses"][i])
