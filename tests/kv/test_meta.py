"""KVBatchMeta splits and merges like a batch, keeps groups whole, and stays light to pickle."""

import pickle

import pytest

from verl_lite.kv import KVBatchMeta
from verl_lite.trajectory import trajectory_key


def grpo_meta(groups: int, n: int) -> KVBatchMeta:
    keys = [trajectory_key(f"g{g}", s) for g in range(groups) for s in range(n)]
    tags = [{"uid": f"g{g}", "status": "success"} for g in range(groups) for _ in range(n)]
    return KVBatchMeta(
        keys=keys, tags=tags, partition_id="train", fields=["responses"], global_step=3, samples_per_prompt=n
    )


def test_chunk_returns_exactly_n_contiguous_parts_that_differ_by_at_most_one():
    meta = grpo_meta(groups=5, n=1)
    parts = meta.chunk(3)
    assert [len(p) for p in parts] == [2, 2, 1]
    assert [len(p) for p in grpo_meta(2, 1).chunk(4)] == [1, 1, 0, 0]  # empty parts allowed
    assert all(p.global_step == 3 and p.samples_per_prompt == 1 and p.partition_id == "train" for p in parts)
    assert KVBatchMeta.concat(parts).keys == meta.keys


def test_select_keeps_tags_aligned_with_keys():
    meta = grpo_meta(groups=3, n=2)
    picked = meta.select([5, 0])
    assert picked.keys == ["g2_1_0", "g0_0_0"]
    assert [t["uid"] for t in picked.tags] == ["g2", "g0"]


def test_split_by_group_never_splits_a_uid_and_balances_rows():
    meta = grpo_meta(groups=6, n=4)  # 24 rows in groups of 4
    parts = meta.split_by_group(3)
    assert [len(p) for p in parts] == [8, 8, 8]
    seen = [set(p.group_uids()) for p in parts]
    assert [p.group_uids() for p in parts] == [["g0", "g1"], ["g2", "g3"], ["g4", "g5"]]
    assert all(not (a & b) for i, a in enumerate(seen) for b in seen[i + 1 :])
    assert KVBatchMeta.concat(parts).keys == meta.keys


def test_split_by_group_gathers_interleaved_rows_and_uses_key_prefix_without_uid_tag():
    meta = KVBatchMeta(keys=["a_0_0", "b_0_0", "a_1_0", "c_0_0"])  # no tags: group = key prefix
    parts = meta.split_by_group(2)
    assert [p.keys for p in parts] == [["a_0_0", "a_1_0"], ["b_0_0", "c_0_0"]]
    assert [len(p) for p in grpo_meta(groups=1, n=4).split_by_group(3)] in ([4, 0, 0], [0, 4, 0], [0, 0, 4])


def test_concat_keeps_fields_held_by_every_part_and_rejects_mixed_partitions():
    a = KVBatchMeta(keys=["x"], fields=["responses", "old_log_probs"])
    b = KVBatchMeta(keys=["y"], fields=["responses"])
    assert KVBatchMeta.concat([a, b]).fields == ["responses"]
    with pytest.raises(ValueError, match="different partitions"):
        KVBatchMeta.concat([a, KVBatchMeta(keys=["z"], partition_id="val")])


def test_meta_is_a_few_bytes_per_row_when_pickled():
    meta = grpo_meta(groups=64, n=4)
    size = len(pickle.dumps(meta))
    assert pickle.loads(pickle.dumps(meta)) == meta
    assert size / len(meta) < 100  # key + small tag, no tensors


def test_dp_dispatch_splits_and_merges_a_meta_like_a_batch():
    from verl_lite.single_controller.dispatch import is_splittable, merge_rows, split_rows

    meta = grpo_meta(groups=5, n=2)
    shards, pad = split_rows(meta, 4)
    assert is_splittable(meta) and pad == 0 and [len(s) for s in shards] == [3, 3, 2, 2]
    assert merge_rows(shards, pad).keys == meta.keys
