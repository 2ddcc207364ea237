"""Sequence packing (``model.use_remove_padding``): packed forwards and updates equal padded ones."""

import torch
from tensordict import TensorDict
from transformers import AutoModelForCausalLM

from tests.workers.helpers import jagged, make_group, release
from tests.workers.test_actor_update_on_cpu import OPTIM, U
from verl_lite.algorithms import entropy_from_logits
from verl_lite.workers.engine.packing import pack_rows, packed_indices, unpack_to_grid

# Rows of very different lengths: 3 to 120 tokens (the test model holds 128 positions).
PROMPTS = [[3, 4], [5, 6, 7, 8, 9, 10] * 5, [11, 12, 13, 14, 15], [16, 17, 3, 4] * 3]
RESPONSES = [[5], [6, 7, 8, 9, 10, 11, 12, 13, 14] * 10, [15, 16, 17, 3] * 10, [4, 5, 6]]
ADVANTAGES = [1.0, -0.5, 0.25, -1.0]


def test_pack_rows_keeps_each_rows_tokens_and_positions_and_finds_them_again():
    # Row 0: left-padded prompt [7, 8] + response [9]; row 1: [4] + [5, 6] then right padding.
    input_ids = torch.tensor([[0, 7, 8, 9], [4, 5, 6, 0]])
    attention_mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 0]])
    packed = pack_rows(input_ids, attention_mask)
    assert packed.input_ids.tolist() == [[7, 8, 9, 4, 5, 6]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 0, 1, 2]]
    assert packed.cu_seq_lens.tolist() == [0, 3, 6] and packed.max_length == 3
    # Columns 2..3 of the padded grid: row 0 holds tokens 1, 2 of the pack; row 1 tokens 5 and padding.
    index, keep = packed_indices(packed.valid, slice(2, 4))
    assert index.tolist() == [1, 2, 5] and keep.tolist() == [[True, True], [True, False]]
    grid = unpack_to_grid(torch.tensor([[[10.0], [20.0], [50.0]]]), keep)
    assert grid.squeeze(-1).tolist() == [[10.0, 20.0], [50.0, 0.0]]


def put_long_trajectories(kv):
    fields = {
        "prompts": jagged(PROMPTS),
        "responses": jagged(RESPONSES),
        "advantages": jagged([[a] * len(r) for a, r in zip(ADVANTAGES, RESPONSES)], torch.float32),
    }
    keys = [f"long{i}_0_0" for i in range(len(PROMPTS))]
    tags = [{"uid": f"long{i}"} for i in range(len(keys))]
    return kv.kv_batch_put(keys, "train", fields=TensorDict(fields, batch_size=[len(keys)]), tags=tags)


def test_packed_log_probs_and_entropies_equal_each_row_scored_alone(tiny_model_dir, kv_store):
    # Packed, and cut by a 130-token budget: the 120-token row alone, the three short ones together.
    sections = {"rollout": {"log_prob_use_dynamic_bsz": True, "log_prob_max_token_len_per_gpu": 130}}
    group = make_group(
        tiny_model_dir, 1, name="packed_lp", model={"use_remove_padding": True}, sections=sections
    )
    try:
        meta = group.compute_log_prob(put_long_trajectories(kv_store))
        stored = kv_store.kv_batch_get(meta.keys, "train", select_fields=["old_log_probs", "entropy"])
    finally:
        release(group)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    rows = zip(PROMPTS, RESPONSES, stored["old_log_probs"].unbind(), stored["entropy"].unbind())
    for prompt, response, log_prob, entropy in rows:
        with torch.no_grad():
            logits = model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1]
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1)
        assert (log_prob - expected).abs().max() < 1e-5
        assert (entropy - entropy_from_logits(logits)).abs().max() < 1e-5


def _gradients(model_dir, kv, name, **kwargs):
    group = make_group(model_dir, 1, name=name, optim=OPTIM, ppo_micro_batch_size_per_gpu=2, **kwargs)
    try:
        group.keep_gradients()
        group.update_actor(group.compute_log_prob(put_long_trajectories(kv)))
        return group.saved_gradients()
    finally:
        release(group)


def test_packed_update_has_the_padded_updates_gradients(tiny_model_dir, kv_store):
    padded = _gradients(tiny_model_dir, kv_store, "grad_padded")
    packed = _gradients(tiny_model_dir, kv_store, "grad_packed", model={"use_remove_padding": True})
    budget = _gradients(
        tiny_model_dir,
        kv_store,
        "grad_budget",
        model={"use_remove_padding": True},
        use_dynamic_bsz=True,
        ppo_max_token_len_per_gpu=130,
    )
    # Both sides do the same float32 math in another order (row-by-row attention, other micro-batch
    # sums). A weight gradient sums over every token of the batch (249 here), through at most ~64
    # such reductions (see test_actor_update_on_cpu), so it moves by at most 64 * 249 * U of its scale;
    # a row attending across a row boundary changes it by far more.
    bound = 64 * sum(len(p) + len(r) for p, r in zip(PROMPTS, RESPONSES)) * U
    for other in (packed, budget):
        assert other.keys() == padded.keys()
        for name, g in padded.items():
            err, scale = float((other[name] - g).abs().max()), float(g.abs().max())
            assert err <= bound * scale, f"{name}: |diff| {err:.3g} > {bound:.2g} * max|g| {scale:.3g}"
