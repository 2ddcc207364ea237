"""A value head on the actor (``actor.value_head``): the critic that shares the policy's body.

Its values and the joint loss's gradient (policy loss + loss_coef x clipped value loss) through two gloo
ranks equal a single-process reference; the head stays out of the weight sync and of the Hugging Face
weights, and checkpoints, exports and merges keep it beside them. With LoRA the head trains in full next
to the adapters, and the rollout still gets the adapters only.
"""

import torch
from safetensors.torch import load_file
from tensordict import TensorDict
from transformers import AutoModelForCausalLM

from tests.workers.helpers import (
    ADVANTAGES,
    PROMPTS,
    RESPONSES,
    jagged,
    make_group,
    put_trajectories,
    release,
)
from tests.workers.test_actor_update_on_cpu import GRAD_RTOL, OPTIM, assert_gradients_match
from verl_lite import model_merger
from verl_lite.algorithms import compute_value_loss, get_policy_loss_fn
from verl_lite.workers.engine.value_head import VALUE_HEAD_FILE, ValueHead, split_value_head
from verl_lite.workers.sequences import build_model_inputs, response_log_probs_and_entropy, response_values

HEAD = {"enable": True, "hidden_dim": 16, "loss_coef": 0.7, "cliprange_value": 0.5}
RETURNS = [1.0, -0.5, 0.25, 2.0]
# Added to the stored rollout-time values: rows 1 and 2 sit 0.8 from the head's prediction, beyond the 0.5
# clip, so their value loss takes the clipped branch where it is the larger error.
OLD_VALUE_SHIFT = [0.0, 0.8, -0.8, 0.0]


def reference(model_dir: str, weights: dict[str, torch.Tensor]):
    """The response values and the joint loss's full-batch gradients in one process, from ``weights``."""
    body, head_state = split_value_head(weights)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.load_state_dict(body)
    head = ValueHead(model.config.hidden_size, HEAD["hidden_dim"])
    head.load_state_dict(head_state)
    inputs = build_model_inputs([torch.tensor(p) for p in PROMPTS], [torch.tensor(r) for r in RESPONSES], 0)
    out = model(
        input_ids=inputs["input_ids"],
        attention_mask=inputs["attention_mask"],
        position_ids=inputs["position_ids"],
        output_hidden_states=True,
    )
    mask = inputs["response_mask"].float()
    vpreds = response_values(head(out.hidden_states[-1]), mask.shape[1])
    log_prob, _ = response_log_probs_and_entropy(out.logits, inputs)
    adv = torch.tensor(ADVANTAGES).unsqueeze(1) * mask
    returns = torch.tensor(RETURNS).unsqueeze(1) * mask
    pg_loss, _ = get_policy_loss_fn("vanilla")(log_prob.detach(), log_prob, adv, mask, "token-mean")
    old_values = vpreds.detach() + torch.tensor(OLD_VALUE_SHIFT).unsqueeze(1) * mask
    vf_loss, _ = compute_value_loss(vpreds, returns, old_values, mask, HEAD["cliprange_value"], "token-mean")
    (pg_loss + HEAD["loss_coef"] * vf_loss).backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    grads.update({f"value_head.{name}": p.grad.detach().clone() for name, p in head.named_parameters()})
    return vpreds.detach()[mask.bool()], grads


def read(kv, meta, field):
    return kv.kv_batch_get(meta.keys, "train", select_fields=[field])[field]


def test_values_and_joint_gradient_match_a_single_process_reference(tiny_model_dir, kv_store, tmp_path):
    group = make_group(tiny_model_dir, 2, name="value_head", optim=OPTIM, value_head=HEAD)
    packed = make_group(
        tiny_model_dir, 1, name="value_head_packed", model={"use_remove_padding": True}, value_head=HEAD
    )
    try:
        weights = group.full_weights()
        assert weights["value_head.layers.0.weight"].shape == (16, 64)  # hidden_dim 16 on the 64-wide body
        expected_values, expected_grads = reference(tiny_model_dir, weights)
        meta = put_trajectories(kv_store)
        returns = jagged([[r] * len(resp) for r, resp in zip(RETURNS, RESPONSES)], torch.float32)
        kv_store.kv_batch_put(meta.keys, "train", fields=TensorDict({"returns": returns}, [len(meta)]))
        meta = group.compute_values(meta.with_fields(["returns"]))
        values = read(kv_store, meta, "values")
        assert values.offsets().diff().tolist() == [len(r) for r in RESPONSES]
        # the same float32 model: the values agree to rounding (bound as the gradients', GRAD_RTOL)
        scale = float(expected_values.abs().max())
        assert float((values.values() - expected_values).abs().max()) <= GRAD_RTOL * scale
        # packed rows (another process, the same seed: the same head) give the padded forward's values
        packed_values = read(kv_store, packed.compute_values(meta), "values").values()
        assert float((packed_values - expected_values).abs().max()) <= GRAD_RTOL * scale

        shifted = [v + s for v, s in zip(values.unbind(), OLD_VALUE_SHIFT)]
        shifted = torch.nested.nested_tensor(shifted, layout=torch.jagged)
        kv_store.kv_batch_put(meta.keys, "train", fields=TensorDict({"values": shifted}, [len(meta)]))
        group.keep_gradients()
        [metrics, _] = group.update_actor(meta)
        assert_gradients_match(group.saved_gradients(), expected_grads)
        assert {"critic/vf_loss", "critic/vpred_mean", "actor/pg_loss"} <= set(metrics)
        assert metrics["critic/vf_clipfrac"].value > 0  # some tokens took the clipped branch

        # the rollout gets the policy only; the checkpoint, the export and the merger keep the head
        assert all(not n.startswith("value_head.") for n in group.synced_names()[0])
        trained = group.full_weights()
        group.save_checkpoint(str(tmp_path / "actor"), str(tmp_path / "export"))
        exported = load_file(str(tmp_path / "export" / "model.safetensors"))
        assert not any(k.startswith("value_head.") for k in exported)
        AutoModelForCausalLM.from_pretrained(tmp_path / "export")
        head = torch.load(tmp_path / "export" / VALUE_HEAD_FILE)
        model_merger.merge_checkpoint(str(tmp_path / "actor"), str(tmp_path / "merged"))
        merged = torch.load(tmp_path / "merged" / VALUE_HEAD_FILE)
        assert head.keys() == merged.keys() == split_value_head(trained)[1].keys()
        assert all(
            torch.equal(head[k], merged[k]) and torch.equal(head[k], trained[f"value_head.{k}"]) for k in head
        )
        saved = read(kv_store, group.compute_values(meta), "values").values()
        group.update_actor(meta)
        assert not torch.equal(read(kv_store, group.compute_values(meta), "values").values(), saved)
        group.load_checkpoint(str(tmp_path / "actor"))
        assert torch.equal(read(kv_store, group.compute_values(meta), "values").values(), saved)
    finally:
        release(group)
        release(packed)


def test_with_lora_the_head_trains_in_full_next_to_the_adapters(tiny_model_dir, kv_store, tmp_path):
    lora = {"lora_rank": 4, "lora_alpha": 8, "target_modules": "all-linear"}
    group = make_group(tiny_model_dir, 1, name="value_head_lora", model=lora, optim=OPTIM, value_head=HEAD)
    try:
        meta = put_trajectories(kv_store)
        returns = jagged([[r] * len(resp) for r, resp in zip(RETURNS, RESPONSES)], torch.float32)
        kv_store.kv_batch_put(meta.keys, "train", fields=TensorDict({"returns": returns}, [len(meta)]))
        meta = group.compute_values(meta.with_fields(["returns"]))
        before = group.full_weights()
        group.update_actor(meta)
        after = group.full_weights()
        head = [k for k in before if ".value_head." in k]
        frozen = [
            k for k in before if ".value_head." not in k and ".lora_" not in k and "original_module" not in k
        ]
        assert head and all(not torch.equal(before[k], after[k]) for k in head)  # the head trains
        assert all(torch.equal(before[k], after[k]) for k in frozen)  # the base does not
        # the rollout gets the adapters only; the checkpoint restores the head, the merger writes it
        synced = group.synced_names()[0]
        assert synced and all(".lora_A." in n or ".lora_B." in n for n in synced)
        group.save_checkpoint(str(tmp_path / "actor"))
        saved = read(kv_store, group.compute_values(meta), "values").values()
        group.update_actor(meta)
        group.load_checkpoint(str(tmp_path / "actor"))
        assert torch.equal(read(kv_store, group.compute_values(meta), "values").values(), saved)
        model_merger.merge_checkpoint(
            str(tmp_path / "actor"), str(tmp_path / "merged"), base_model=tiny_model_dir
        )
        merged = torch.load(tmp_path / "merged" / VALUE_HEAD_FILE)
        trained = {
            k.split(".value_head.", 1)[1]: t for k, t in group.full_weights().items() if ".value_head." in k
        }
        assert merged.keys() == trained.keys() and all(torch.equal(merged[k], trained[k]) for k in merged)
    finally:
        release(group)
