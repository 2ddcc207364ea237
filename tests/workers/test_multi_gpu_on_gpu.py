"""The policy worker on two GPUs: each rank on its own device, CPU collectives beside NCCL, fp32 and bf16.

What CPU tests cannot show (tests/workers/engine/test_device.py plays the choices with what Ray sets):
the ranks really land on distinct devices, the ``cpu:gloo,cuda:nccl`` group carries the CPU-tensor
collectives (token counts, offloaded shards' gradient norm and full-tensor gathers), a float32 update
gives the single-process gradient, and bf16 packing loads flash-attn where it is installed.
Run on a machine with 2 GPUs: ``pytest -q tests/workers/test_multi_gpu_on_gpu.py``.
"""

import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.utils import is_flash_attn_2_available

from tests.workers.helpers import make_group, put_trajectories, release
from tests.workers.test_actor_update_on_cpu import OPTIM, assert_gradients_match, reference_step
from verl_lite.workers.engine.device import GPU_BACKEND

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        torch.cuda.device_count() < 2,
        reason=f"needs 2 CUDA GPUs (this machine has {torch.cuda.device_count()}); run on a GPU machine",
    ),
]


@pytest.mark.parametrize("offload", [False, True], ids=["on_device", "param_offload"])
def test_two_gpu_ranks_train_on_their_own_devices_and_match_the_reference(tiny_model_dir, kv_store, offload):
    # float32 on the GPU, so the gradient has the CPU reference's rounding bound; lr 0 keeps the weights.
    group = make_group(
        tiny_model_dir,
        2,
        name=f"gpu_{offload}",
        use_gpu=True,
        sections={"engine": {"param_dtype": "float32"}},
        optim={**OPTIM, "lr": 0.0},
        fsdp_config={"param_offload": offload},
    )
    try:
        reports = group.device_report()
        group.keep_gradients()
        group.update_actor(group.compute_log_prob(put_trajectories(kv_store)))
        grads = group.saved_gradients()
        weights = group.full_weights()  # a full-tensor gather (of CPU shards with param_offload)
    finally:
        release(group)
    assert len({r["uuid"] for r in reports}) == 2, reports
    assert all(r["device"] == "cuda:0" and r["backend"] == GPU_BACKEND for r in reports), reports
    reference_grads, _ = reference_step(tiny_model_dir)
    assert_gradients_match(grads, reference_grads)
    initial = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    assert all(torch.equal(weights[name].cpu(), initial[name]) for name in initial)


def test_bf16_packed_update_uses_flash_attn_where_installed_and_checkpoints_cuda_rng(
    tiny_model_dir, kv_store, tmp_path
):
    group = make_group(
        tiny_model_dir, 2, name="gpu_bf16", use_gpu=True, model={"use_remove_padding": True}, optim=OPTIM
    )
    try:
        reports = group.device_report()
        metrics = group.update_actor(group.compute_log_prob(put_trajectories(kv_store)))
        group.save_checkpoint(str(tmp_path / "ckpt"))
        group.load_checkpoint(str(tmp_path / "ckpt"))
    finally:
        release(group)
    expected = "flash_attention_2" if is_flash_attn_2_available() else "varlen_sdpa"
    assert {r["attention"] for r in reports} == {expected}
    assert all(torch.isfinite(torch.tensor(m["actor/grad_norm"].value)) for m in metrics)
    assert "cuda" in torch.load(tmp_path / "ckpt" / "extra_rank1.pt", weights_only=False)["rng"]
