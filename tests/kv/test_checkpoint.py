"""A partition snapshot restores every key's tags and fields bit-exactly, even through torch.save."""

import io

import torch
from tensordict import TensorDict

from tests.batches import make_batch
from verl_lite.kv.checkpoint import load_partition_state_dict, partition_state_dict
from verl_lite.protocol import to_jagged


def test_partition_snapshot_round_trips_keys_with_different_field_sets(kv_client, partition):
    full = make_batch(
        {
            "responses": to_jagged([torch.arange(3), torch.arange(1)]),
            "ref_log_prob": torch.randn(2, 4).to(torch.bfloat16),
            "ground_truth": ["7", "12"],
        }
    )
    kv_client.kv_batch_put(["g"], partition, tags=[{"status": "running", "global_steps": 3}])
    kv_client.kv_batch_put(["g_0_0", "g_1_0"], partition, fields=full, tags=[{"uid": "g"}] * 2)
    kv_client.kv_batch_put(
        ["h_0_0"], partition, fields=TensorDict({"responses": to_jagged([torch.arange(2)])}, [1])
    )
    buffer = io.BytesIO()
    torch.save(partition_state_dict(kv_client, partition), buffer)
    kv_client.kv_clear(None, partition)
    buffer.seek(0)
    meta = load_partition_state_dict(kv_client, torch.load(buffer, weights_only=False))
    assert sorted(meta.keys) == ["g", "g_0_0", "g_1_0", "h_0_0"]
    assert kv_client.kv_list(partition)[partition]["g"] == {"status": "running", "global_steps": 3}
    back = kv_client.kv_batch_get(["g_0_0", "g_1_0"], partition)
    assert torch.equal(back["ref_log_prob"], full["ref_log_prob"])
    assert torch.equal(back["responses"].values(), full["responses"].values())
    assert back["ground_truth"].tolist() == ["7", "12"]
    assert kv_client.kv_field_names(partition)[partition]["h_0_0"] == ["responses"]
