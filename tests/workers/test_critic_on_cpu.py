"""The critic writes values for every response token and its update moves them toward the returns."""

import torch
from tensordict import TensorDict
from transformers import AutoModelForTokenClassification

from tests.workers.helpers import RESPONSES, jagged, make_workers, put_trajectories, release
from verl_lite import model_merger
from verl_lite.single_controller.ray import RayClassWithInitArgs
from verl_lite.workers.critic import CriticWorker


def read_values(kv_store, meta):
    return kv_store.kv_batch_get(meta.keys, "train", select_fields=["values"])["values"].values()


def test_critic_values_have_response_shape_and_update_reduces_value_error(tiny_model_dir, kv_store, tmp_path):
    config = {
        "model": {"path": tiny_model_dir},
        "critic": {
            "ppo_mini_batch_size": 4,
            "ppo_micro_batch_size_per_gpu": 2,
            "shuffle": False,
            "cliprange_value": 100.0,
            "optim": {"lr": 1e-2},
        },
    }
    group = make_workers("critic", RayClassWithInitArgs(CriticWorker, config), 2)
    try:
        group.init_model()
        meta = put_trajectories(kv_store)
        returns = jagged([[1.0] * len(r) for r in RESPONSES], torch.float32)
        kv_store.kv_batch_put(meta.keys, "train", fields=TensorDict({"returns": returns}, [len(meta)]))
        meta = group.compute_values(meta)
        values = kv_store.kv_batch_get(meta.keys, "train", select_fields=["values"])["values"]
        assert values.offsets().diff().tolist() == [len(r) for r in RESPONSES]
        before = (values.values() - 1.0).square().mean()
        losses = [group.update_critic(meta) for _ in range(5)]
        assert all("critic/vf_loss" in m[0] and "critic/grad_norm" in m[0] for m in losses)
        values = kv_store.kv_batch_get(group.compute_values(meta).keys, "train", select_fields=["values"])[
            "values"
        ]
        assert (values.values() - 1.0).square().mean() < before
        # A checkpoint brings back exactly the values of when it was taken, and merges into an HF model.
        group.save_checkpoint(str(tmp_path / "critic"))
        saved = read_values(kv_store, group.compute_values(meta))
        group.update_critic(meta)
        assert not torch.equal(read_values(kv_store, group.compute_values(meta)), saved)
        group.load_checkpoint(str(tmp_path / "critic"))
        assert torch.equal(read_values(kv_store, group.compute_values(meta)), saved)
        model_merger.merge_checkpoint(str(tmp_path / "critic"), str(tmp_path / "hf"))
        assert AutoModelForTokenClassification.from_pretrained(tmp_path / "hf").config.num_labels == 1
    finally:
        release(group)
