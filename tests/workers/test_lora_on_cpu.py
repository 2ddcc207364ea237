"""LoRA adapters (``model.lora_rank``): only adapters train, sync and checkpoint; the reference is the base."""

import torch
import torch.distributed.checkpoint as dcp
from peft import PeftConfig, PeftModel
from tensordict import TensorDict
from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

from tests.workers.helpers import (
    PROMPTS,
    RESPONSES,
    jagged,
    make_group,
    make_hybrid,
    make_workers,
    put_trajectories,
    release,
    release_hybrid,
)
from tests.workers.test_checkpoint_on_cpu import flatten
from verl_lite import model_merger
from verl_lite.single_controller.ray import RayClassWithInitArgs
from verl_lite.workers.critic import CriticWorker
from verl_lite.workers.lora import is_adapter

LORA = {"lora_rank": 4, "lora_alpha": 8}
IDS = torch.tensor([[3, 4, 13, 5, 6, 7], [8, 9, 15, 10, 11, 12]])
# The tiny test model: 2 layers, hidden 64, one 32-wide KV head, MLP 128. Rank-4 adapters on every
# linear but the head hold 4 * (in + out) numbers each: q, o 4 * 128; k, v 4 * 96; gate, up, down
# 4 * 192; 4096 a layer, 8192 in all, 32768 bytes in float32.
ADAPTER_BYTES = 2 * 4 * (2 * 128 + 2 * 96 + 3 * 192) * 4


def _two_updates(group, kv):
    """Two updates: the first moves only lora_B (B starts at 0, so A's gradient is 0), the second both."""
    meta = group.compute_log_prob(put_trajectories(kv))
    group.update_actor(meta)
    group.update_actor(group.compute_log_prob(meta))
    return meta


def _full_forward_log_probs(model, prompt, response):
    with torch.no_grad():
        logits = model(torch.cat([prompt, response]).unsqueeze(0)).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits, -1).gather(-1, response.unsqueeze(-1)).squeeze(-1)


def test_a_lora_step_moves_only_adapters_and_the_reference_stays_the_base_model(tiny_model_dir, kv_store):
    group = make_group(tiny_model_dir, 2, name="lora_ref", model={**LORA, "use_remove_padding": True})
    try:
        before = group.full_weights()
        meta = _two_updates(group, kv_store)
        after = group.full_weights()
        meta = group.compute_ref_log_prob(group.compute_log_prob(meta))
        fields = ["prompts", "responses", "ref_log_prob", "old_log_probs"]
        stored = kv_store.kv_batch_get(meta.keys, "train", select_fields=fields)
    finally:
        release(group)
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert changed == {name for name in before if is_adapter(name)} and len(changed) == 28
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    for prompt, response, ref, old in zip(*(stored[f].unbind() for f in fields)):
        expected = _full_forward_log_probs(base, prompt, response)
        assert (ref - expected).abs().max() < 1e-5  # the adapters were off
        assert (old - expected).abs().max() > 1e-3  # and they do change the policy


def test_a_lora_sync_carries_only_adapters_and_the_rollout_then_serves_the_actor(tiny_model_dir, kv_store):
    hybrid = make_hybrid(tiny_model_dir, 1, name="lora_sync", model=LORA)
    try:
        for version in (1, 2):  # the second merge starts from the kept base, not from the first merge
            _two_updates(hybrid.actor, kv_store)
            metrics = hybrid.sync(version)
            diff = (
                hybrid.rollout.rollout_logits(IDS, torch.ones_like(IDS))[0]
                - hybrid.actor.actor_logits(IDS, torch.ones_like(IDS))[0]
            )
            assert diff.abs().max() < 1e-5
            assert metrics[0]["update_weights/bytes"].value == ADAPTER_BYTES
    finally:
        release_hybrid(hybrid)
    full = sum(
        t.numel() * t.element_size()
        for t in AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict().values()
    )
    assert ADAPTER_BYTES < 0.5 * full  # here 32 KB of 0.26 MB; on real models well under 5%


def test_a_lora_checkpoint_holds_the_adapters_resumes_exactly_and_exports_merged_or_alone(
    tiny_model_dir, kv_store, tmp_path
):
    group = make_group(tiny_model_dir, 2, role="actor", name="lora_ckpt", model=LORA)
    try:
        _two_updates(group, kv_store)
        group.save_checkpoint(str(tmp_path / "step"), hf_path=str(tmp_path / "hf"))
        saved, saved_optim = group.full_weights(), flatten(group.optimizer_state())
        logits = group.actor_logits(IDS, torch.ones_like(IDS))[0]
        _two_updates(group, kv_store)
        group.load_checkpoint(str(tmp_path / "step"))
        restored, restored_optim = group.full_weights(), flatten(group.optimizer_state())
    finally:
        release(group)
    assert all(torch.equal(saved[k], restored[k]) for k in saved)
    assert saved_optim.keys() == restored_optim.keys() and len(saved_optim) > 0
    assert all(torch.equal(saved_optim[k], restored_optim[k]) for k in saved_optim)
    stored = dcp.FileSystemReader(str(tmp_path / "step")).read_metadata().state_dict_metadata
    model_keys = [k for k in stored if k.startswith("model.")]
    assert len(model_keys) == 28 and all(is_adapter(k) for k in model_keys)  # no base weight saved
    merged_dir, adapter_dir = str(tmp_path / "merged"), str(tmp_path / "adapter")
    assert model_merger.main(["--local_dir", str(tmp_path / "step"), "--target_dir", merged_dir]) == 0
    args = ["--local_dir", str(tmp_path / "step"), "--target_dir", adapter_dir, "--adapter_only"]
    assert model_merger.main(args) == 0
    assert PeftConfig.from_pretrained(adapter_dir).base_model_name_or_path == tiny_model_dir
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    exports = [
        AutoModelForCausalLM.from_pretrained(merged_dir),
        AutoModelForCausalLM.from_pretrained(tmp_path / "hf"),  # the trainer's merged export
        PeftModel.from_pretrained(base, adapter_dir),
    ]
    for model in exports:
        with torch.no_grad():
            assert (model(IDS).logits - logits).abs().max() < 1e-5


def test_a_lora_critic_learns_with_its_head_and_merges_into_a_value_model(tiny_model_dir, kv_store, tmp_path):
    config = {
        "model": {"path": tiny_model_dir, **LORA, "use_remove_padding": True},
        "critic": {
            "ppo_mini_batch_size": 4,
            "ppo_micro_batch_size_per_gpu": 2,
            "shuffle": False,
            "cliprange_value": 100.0,
            "optim": {"lr": 1e-2},
        },
    }
    group = make_workers("critic", RayClassWithInitArgs(CriticWorker, config))
    try:
        group.init_model()
        meta = put_trajectories(kv_store)
        returns = jagged([[1.0] * len(r) for r in RESPONSES], torch.float32)
        kv_store.kv_batch_put(meta.keys, "train", fields=TensorDict({"returns": returns}, [len(meta)]))

        def values():
            td = kv_store.kv_batch_get(group.compute_values(meta).keys, "train", select_fields=["values"])
            return td["values"]

        before = (values().values() - 1.0).square().mean()
        for _ in range(5):
            group.compute_values(meta)
            group.update_critic(meta)
        trained = values()
        assert (trained.values() - 1.0).square().mean() < before
        group.save_checkpoint(str(tmp_path / "critic"))
    finally:
        release(group)
    model_merger.merge_checkpoint(str(tmp_path / "critic"), str(tmp_path / "hf"))
    value_model = AutoModelForTokenClassification.from_pretrained(tmp_path / "hf")
    for prompt, response, got in zip(PROMPTS, RESPONSES, trained.unbind()):
        with torch.no_grad():
            out = value_model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1, 0]
        assert (out - got).abs().max() < 1e-5
