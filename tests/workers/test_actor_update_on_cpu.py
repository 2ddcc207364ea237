"""The actor's PPO update on FSDP2 over gloo: equal to a single-process reference, whatever the cut."""

import torch
from transformers import AutoModelForCausalLM

from tests.workers.helpers import ADVANTAGES, PROMPTS, RESPONSES, make_group, put_trajectories, release
from verl_lite.algorithms import get_policy_loss_fn
from verl_lite.workers.sequences import build_model_inputs, response_log_probs_and_entropy


def reference_step(model_dir: str):
    """One PPO step on the whole batch in one process: token-mean vanilla loss, clip 1.0, AdamW lr 1e-2."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    inputs = build_model_inputs([torch.tensor(p) for p in PROMPTS], [torch.tensor(r) for r in RESPONSES], 0)
    logits = model(
        input_ids=inputs["input_ids"],
        attention_mask=inputs["attention_mask"],
        position_ids=inputs["position_ids"],
    ).logits
    log_prob, _ = response_log_probs_and_entropy(logits, inputs)
    mask = inputs["response_mask"].float()
    adv = torch.tensor(ADVANTAGES).unsqueeze(1) * mask
    loss, _ = get_policy_loss_fn("vanilla")(log_prob.detach(), log_prob, adv, mask, "token-mean")
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01).step()
    return {k: v.detach() for k, v in model.state_dict().items()}


def run_update(model_dir, kv, ranks, **actor):
    group = make_group(model_dir, ranks, name=f"upd{ranks}", **actor)
    try:
        meta = group.compute_log_prob(put_trajectories(kv))
        metrics = group.update_actor(meta)
        return group.full_weights(), metrics
    finally:
        release(group)


def max_diff(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in b)


def test_two_gloo_ranks_match_single_process_reference(tiny_model_dir, kv_store):
    weights, metrics = run_update(tiny_model_dir, kv_store, ranks=2)
    reference = reference_step(tiny_model_dir)
    initial = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    assert max_diff(initial, reference) > 1e-3  # the step really moved the weights
    assert max_diff(weights, reference) < 1e-5
    assert all(abs(m["actor/ppo_kl"]) < 1e-6 for m in metrics)  # first step: ratio is exactly 1


def test_update_is_the_same_for_any_micro_batch_count_or_token_budget(tiny_model_dir, kv_store):
    one, _ = run_update(tiny_model_dir, kv_store, ranks=1, ppo_micro_batch_size_per_gpu=1)
    four, _ = run_update(tiny_model_dir, kv_store, ranks=1, ppo_micro_batch_size_per_gpu=4)
    budget, _ = run_update(
        tiny_model_dir, kv_store, ranks=1, use_dynamic_bsz=True, ppo_max_token_len_per_gpu=10
    )
    assert max_diff(one, four) < 1e-5 and max_diff(one, budget) < 1e-5
