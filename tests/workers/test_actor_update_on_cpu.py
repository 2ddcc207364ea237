"""The actor's PPO update on FSDP2 over gloo: equal to a single-process reference, whatever the cut.

The runs being compared do the same float32 math in different orders (other padding widths,
micro-batch gradients accumulated with ``+=``, a two-rank reduce-scatter average), so they agree
to float32 rounding, not bit for bit. The tests compare what the cut may change, the gradient
accumulated before the optimizer step, within a bound derived from float32 rounding. They never
compare weights after an Adam step between two such runs: AdamW's first update is
``lr * g / (|g| + eps)``, which is ``+-lr`` wherever ``|g| >> eps``. A gradient element that is zero
up to rounding (1e-9 on one CPU, -1e-9 on another) can then move its weight by anything up to
``2 * lr``, so the weights cannot be compared within any bound that a wrong step would exceed.
"""

import math

import torch
from transformers import AutoModelForCausalLM

from tests.workers.helpers import ADVANTAGES, PROMPTS, RESPONSES, make_group, put_trajectories, release
from verl_lite.algorithms import get_policy_loss_fn
from verl_lite.workers.sequences import build_model_inputs, response_log_probs_and_entropy

# Every optimizer setting the reference below relies on, so no default can change the test.
OPTIM = {"lr": 1e-2, "grad_clip": 1.0, "weight_decay": 0.01, "warmup_steps": 0, "lr_scheduler": "constant"}
ADAM_EPS = 1e-8  # torch.optim.AdamW's default; the engine does not change it
U = 2.0**-24  # float32 unit roundoff
# Gradient bound, relative to the largest gradient of the same tensor. Summing n products in another
# order changes the sum by at most about n * U times the sum of their magnitudes (Higham, "Accuracy
# and Stability of Numerical Algorithms", 3.1). Here no reduction is longer than 128 (the MLP width;
# a mini-batch has 4 rows of at most 12 positions), and a gradient passes through at most about 64
# such reductions (2 layers of ~10 forward and ~20 backward ones, plus the head and log-softmax).
# Taking each step as well conditioned, the relative error is at most 64 * 128 * U = 4.9e-4. That is
# a worst case (rounding errors mostly cancel); a wrong loss scale across micro-batches or ranks is
# wrong by tens of percent, or by the factor the scale is off by.
GRAD_RTOL = 64 * 128 * U


def reference_step(model_dir: str, mode: str = "token-mean", norm_length: float | None = None):
    """The full-batch gradients and response log-probs in one process (vanilla loss aggregated by ``mode``;
    ``norm_length`` is seq-mean-token-sum-norm's constant)."""
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
    extra = {} if norm_length is None else {"norm_length": norm_length}
    loss, _ = get_policy_loss_fn("vanilla")(log_prob.detach(), log_prob, adv, mask, mode, **extra)
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    return grads, log_prob.detach()[mask.bool()]


def adamw_first_step(weights: dict, grads: dict) -> dict:
    """OPTIM's clip and first AdamW step in float64: w (1 - lr wd) - lr g / (|g| + eps), g clipped.

    On step 1 the bias corrections make m_hat = g and sqrt(v_hat) = |g|, so the betas drop out.
    """
    g64 = {k: g.double() for k, g in grads.items()}
    norm = math.sqrt(sum(float((g * g).sum()) for g in g64.values()))
    clip = min(1.0, OPTIM["grad_clip"] / (norm + 1e-6))  # what clip_grad_norm_ multiplies by
    lr, wd = OPTIM["lr"], OPTIM["weight_decay"]
    return {
        k: weights[k].double() * (1 - lr * wd) - lr * clip * g / (clip * g.abs() + ADAM_EPS)
        for k, g in g64.items()
    }


def run_update(model_dir, kv, ranks, **actor):
    """One actor update of the fixed batch; returns the gradients before the step, the weights after, metrics."""
    group = make_group(model_dir, ranks, name=f"upd{ranks}", optim=OPTIM, **actor)
    try:
        group.keep_gradients()
        meta = group.compute_log_prob(put_trajectories(kv))
        metrics = group.update_actor(meta)
        return group.saved_gradients(), group.full_weights(), metrics
    finally:
        release(group)


def assert_gradients_match(grads: dict, expected: dict) -> None:
    assert grads.keys() == expected.keys()
    for name, g in expected.items():
        err, scale = float((grads[name] - g).abs().max()), float(g.abs().max())
        assert err <= GRAD_RTOL * scale, f"{name}: |diff| {err:.3g} > {GRAD_RTOL:.2g} * max|g| {scale:.3g}"


def test_two_gloo_ranks_match_single_process_reference(tiny_model_dir, kv_store):
    grads, weights, metrics = run_update(tiny_model_dir, kv_store, ranks=2)
    reference_grads, reference_log_prob = reference_step(tiny_model_dir)
    assert_gradients_match(grads, reference_grads)
    # The step applied to every shard is OPTIM's clip + AdamW on the ranks' own gradients. The fused
    # float32 kernel rounds 1 - lr wd, w (1 - lr wd) and the final difference (<= 4 U |w|) and the
    # update (a few roundings, <= 8 U lr). Its clip factor may be off by the summation error of the
    # norm (relative, <= (largest tensor's elements + number of tensors) U), which moves
    # lr g / (|g| + eps) by at most a quarter of that times lr. An unstepped shard or a wrong lr is
    # off by about lr.
    initial = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    expected = adamw_first_step(initial, grads)
    clip_rtol = (max(g.numel() for g in grads.values()) + len(grads)) * U
    for name, w in expected.items():
        bound = 4 * U * w.abs() + 8 * U * OPTIM["lr"] + OPTIM["lr"] * clip_rtol / 4
        excess = float(((weights[name].double() - w).abs() - bound).max())
        assert excess <= 0, f"{name}: a weight is {excess:.3g} beyond its rounding bound"
        assert float((weights[name] - initial[name]).abs().max()) > OPTIM["lr"] / 2  # it moved
    # First step: the old log-probs are the same weights' log-probs from compute_log_prob's other
    # micro-batching, so log pi - log pi_old is rounding, at most GRAD_RTOL * |log pi| (the same
    # bound as above), and no ratio comes anywhere near the 0.2 clip.
    kl_bound = GRAD_RTOL * float(reference_log_prob.abs().mean())
    assert all(abs(m["actor/ppo_kl"].value) <= kl_bound for m in metrics)  # each rank's
    assert all(m["actor/pg_clipfrac"].value == 0.0 for m in metrics)


def test_update_is_the_same_for_any_micro_batch_count_or_token_budget(tiny_model_dir, kv_store):
    one, _, _ = run_update(tiny_model_dir, kv_store, ranks=1, ppo_micro_batch_size_per_gpu=1)
    four, _, _ = run_update(tiny_model_dir, kv_store, ranks=1, ppo_micro_batch_size_per_gpu=4)
    # Rows are 7, 7, 6 and 7 tokens long: a budget of 14 packs them in pairs.
    budget, _, _ = run_update(
        tiny_model_dir, kv_store, ranks=1, use_dynamic_bsz=True, ppo_max_token_len_per_gpu=14
    )
    assert_gradients_match(one, four)
    assert_gradients_match(budget, four)


def test_entropy_keeps_a_graph_only_when_the_loss_uses_it():
    logits = torch.randn(2, 6, 11, requires_grad=True)
    inputs = {"responses": torch.ones(2, 3, dtype=torch.long)}
    for in_loss in (True, False):
        log_prob, entropy = response_log_probs_and_entropy(
            logits, inputs, with_entropy=True, entropy_requires_grad=in_loss
        )
        assert log_prob.requires_grad  # the policy loss always needs its graph
        assert entropy.requires_grad is in_loss
        assert entropy.shape == (2, 3)
