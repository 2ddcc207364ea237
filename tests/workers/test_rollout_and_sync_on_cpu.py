"""Generation, log-probs and weight sync between actor and rollout on real Ray workers."""

import torch
from transformers import AutoModelForCausalLM

from tests.workers.helpers import PROMPTS, jagged, make_group, put_trajectories, release
from verl_lite.workers.actor_rollout_ref import rollout_probs_diff_mean
from verl_lite.workers.config import RolloutConfig, SamplingConfig
from verl_lite.workers.rollout import HFRollout

IDS = torch.tensor([[3, 4, 13, 5, 6, 7], [8, 9, 15, 10, 11, 12]])


def test_hf_rollout_masks_eos_terminated_and_length_capped_samples(tiny_model_dir):
    torch.manual_seed(0)
    rollout = HFRollout(tiny_model_dir, RolloutConfig(micro_batch_size=64), eos_token_id=1, pad_token_id=0)
    gens = rollout.generate([torch.tensor(p) for p in PROMPTS], SamplingConfig(n=16), max_tokens=6)
    assert len(gens) == 64 and [g.prompt_index for g in gens[:17]] == [0] * 16 + [1]
    reasons = {g.finish_reason for g in gens}
    assert reasons == {"stop", "length"}  # ~1/20 EOS chance per token: both cases occur in 64 samples
    for g in gens:
        eos_at = (g.response_ids == 1).nonzero().flatten().tolist()
        if g.finish_reason == "stop":
            assert eos_at == [len(g.response_ids) - 1]  # ends on its only EOS
        else:
            assert eos_at == [] and len(g.response_ids) == 6
        assert g.log_probs.shape == g.response_ids.shape and bool((g.log_probs <= 0).all())


def test_hf_greedy_with_several_samples_returns_n_identical_copies(tiny_model_dir):
    rollout = HFRollout(tiny_model_dir, RolloutConfig(micro_batch_size=64), eos_token_id=1, pad_token_id=0)
    greedy = SamplingConfig(n=3, do_sample=False, temperature=0.0)
    gens = rollout.generate([torch.tensor(p) for p in PROMPTS], greedy, max_tokens=6)
    assert [(g.prompt_index, g.sample_index) for g in gens[:4]] == [(0, 0), (0, 1), (0, 2), (1, 0)]
    single = rollout.generate([torch.tensor(p) for p in PROMPTS], SamplingConfig(n=1, do_sample=False), 6)
    for g in gens:
        assert torch.equal(g.response_ids, single[g.prompt_index].response_ids)
        assert torch.equal(g.log_probs, single[g.prompt_index].log_probs)


def test_compute_log_prob_equals_full_forward_log_softmax_gather(tiny_model_dir, kv_store):
    group = make_group(tiny_model_dir, 2, name="lp")
    try:
        meta = group.compute_log_prob(put_trajectories(kv_store))
        stored = kv_store.kv_batch_get(
            meta.keys, "train", select_fields=["old_log_probs", "responses", "prompts"]
        )
    finally:
        release(group)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    for prompt, response, got in zip(
        stored["prompts"].unbind(), stored["responses"].unbind(), stored["old_log_probs"].unbind()
    ):
        sequence = torch.cat([prompt, response]).unsqueeze(0)
        logp = torch.log_softmax(model(sequence).logits[0].float(), dim=-1)
        expected = logp[len(prompt) - 1 : -1].gather(-1, response.unsqueeze(-1)).squeeze(-1)
        assert torch.allclose(got, expected, atol=1e-5)


def test_naive_sync_makes_rollout_logits_equal_actor_logits(tiny_model_dir, kv_store):
    group = make_group(tiny_model_dir, 1, name="naive")
    try:
        meta = group.compute_log_prob(put_trajectories(kv_store))
        group.update_actor(meta)
        before = (
            group.rollout_logits(IDS, torch.ones_like(IDS))[0]
            - group.actor_logits(IDS, torch.ones_like(IDS))[0]
        )
        group.update_weights(7)
        after = (
            group.rollout_logits(IDS, torch.ones_like(IDS))[0]
            - group.actor_logits(IDS, torch.ones_like(IDS))[0]
        )
        assert before.abs().max() > 1e-3 and after.abs().max() < 1e-5
        assert group.weight_version() == [7]
    finally:
        release(group)


def test_ray_sync_carries_weights_to_a_separate_rollout_group(tiny_model_dir, kv_store):
    actor = make_group(tiny_model_dir, 2, role="actor", name="ray_actor", **{})
    rollout = make_group(tiny_model_dir, 1, role="rollout", name="ray_rollout")
    try:
        for group in (actor, rollout):
            group.execute_all("_set_sync", "ray")
        meta = actor.compute_log_prob(put_trajectories(kv_store))
        actor.update_actor(meta)
        handle = actor.send_weights(3)
        assert rollout.receive_weights(handle, 3) == [3]
        diff = (
            rollout.rollout_logits(IDS, torch.ones_like(IDS))[0]
            - actor.actor_logits(IDS, torch.ones_like(IDS))[0]
        )
        assert diff.abs().max() < 1e-5
    finally:
        release(actor)
        release(rollout)


def test_rollout_and_actor_log_probs_agree_on_generated_sequences(tiny_model_dir, kv_store):
    group = make_group(tiny_model_dir, 2, name="agree")
    try:
        prompts = kv_store.kv_batch_put(
            ["p0", "p1"], "train", fields=None, tags=[{"uid": "p0"}, {"uid": "p1"}]
        )
        from tensordict import TensorDict

        kv_store.kv_batch_put(prompts.keys, "train", fields=TensorDict({"prompts": jagged(PROMPTS[:2])}, [2]))
        trajectories = group.generate_sequences(prompts)
        assert sorted(trajectories.keys) == ["p0_0_0", "p0_1_0", "p1_0_0", "p1_1_0"]
        scored = group.compute_log_prob(trajectories)
        assert rollout_probs_diff_mean(scored) < 1e-5
    finally:
        release(group)


def _generate(kv_store, uids):
    from tensordict import TensorDict

    prompts = kv_store.kv_batch_put(uids, "train", tags=[{"uid": u} for u in uids])
    kv_store.kv_batch_put(prompts.keys, "train", fields=TensorDict({"prompts": jagged(PROMPTS[:2])}, [2]))
    return prompts


def test_free_cache_engine_sleeps_after_generation_and_wakes_before_the_weight_sync(tiny_model_dir, kv_store):
    # free_cache_engine defaults to true; the probe backend can sleep (and breaks loudly if misordered).
    group = make_group(tiny_model_dir, 1, role="actor_rollout", name="sleepy", rollout_name="hf_sleep_probe")
    try:
        group.generate_sequences(_generate(kv_store, ["s0", "s1"]))
        assert group.rollout_sleep_state() == [
            {"sleeps": True, "asleep": True, "events": ["generate", "sleep"]}
        ]
        group.update_actor(group.compute_log_prob(put_trajectories(kv_store)))  # training while asleep
        group.update_weights(1)
        trajectories = group.generate_sequences(_generate(kv_store, ["s2", "s3"]))
        state = group.rollout_sleep_state()[0]
        assert state["events"] == ["generate", "sleep", "wake_up", "load_weights", "generate", "sleep"]
        # Woken before the sync, so the served weights are the trained actor's (not the stale stash).
        assert rollout_probs_diff_mean(group.compute_log_prob(trajectories)) < 1e-5
    finally:
        release(group)


def test_free_cache_engine_is_skipped_for_the_hf_backend_which_cannot_sleep(tiny_model_dir, kv_store):
    group = make_group(tiny_model_dir, 1, role="actor_rollout", name="awake")
    try:
        group.generate_sequences(_generate(kv_store, ["a0", "a1"]))
        assert group.rollout_sleep_state() == [{"sleeps": False, "asleep": False, "events": None}]
    finally:
        release(group)
