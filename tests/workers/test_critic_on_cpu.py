"""The critic writes values for every response token and its update moves them toward the returns."""

import torch
from tensordict import TensorDict

from tests.workers.helpers import RESPONSES, jagged, put_trajectories
from verl_lite.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl_lite.workers.critic import CriticWorker


def test_critic_values_have_response_shape_and_update_reduces_value_error(tiny_model_dir, kv_store):
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
    group = RayWorkerGroup(
        RayResourcePool([2], name_prefix="critic"), RayClassWithInitArgs(CriticWorker, config)
    )
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
    finally:
        group.kill()
        group.resource_pool.release()
