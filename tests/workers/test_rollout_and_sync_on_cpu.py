"""Log-probs, generation through the agent-loop manager, and weight sync between actor and rollout servers."""

import torch
from transformers import AutoModelForCausalLM

from tests.workers.helpers import (
    PROMPTS,
    actor_config,
    make_group,
    make_hybrid,
    make_workers,
    put_trajectories,
    release,
    release_hybrid,
)
from tests.workers.probes import InspectableRollout
from verl_lite.single_controller.ray import RayClassWithInitArgs
from verl_lite.utils.metrics import reduce_metrics
from verl_lite.workers.policy import PROBS_DIFF

IDS = torch.tensor([[3, 4, 13, 5, 6, 7], [8, 9, 15, 10, 11, 12]])


def probs_diff(meta) -> float:
    return reduce_metrics([meta.metrics])[PROBS_DIFF]


def _prompts(kv_store, uids):
    """Pending prompt groups ``uids`` (markers in the store) and their prompt rows, for generate_sequences."""
    prompts = kv_store.kv_batch_put(uids, "train", tags=[{"uid": u} for u in uids])
    return prompts, [{"prompt_ids": list(PROMPTS[i % len(PROMPTS)])} for i in range(len(uids))]


def test_compute_log_prob_equals_full_forward_log_softmax_gather(tiny_model_dir, kv_store):
    group = make_group(tiny_model_dir, 2, role="actor", name="lp")
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


def test_naive_sync_makes_the_colocated_server_serve_the_actor_weights(tiny_model_dir, kv_store):
    hybrid = make_hybrid(tiny_model_dir, 1, name="naive")
    try:
        hybrid.actor.update_actor(hybrid.actor.compute_log_prob(put_trajectories(kv_store)))
        ones = torch.ones_like(IDS)
        before = hybrid.rollout.rollout_logits(IDS, ones)[0] - hybrid.actor.actor_logits(IDS, ones)[0]
        metrics = reduce_metrics(hybrid.sync(7))  # one server's records
        after = hybrid.rollout.rollout_logits(IDS, ones)[0] - hybrid.actor.actor_logits(IDS, ones)[0]
        assert before.abs().max() > 1e-3 and after.abs().max() < 1e-5
        assert hybrid.rollout.weight_version() == [7] and metrics["update_weights/bytes"] > 0
    finally:
        release_hybrid(hybrid)


def test_ray_sync_carries_weights_to_a_standalone_rollout_group(tiny_model_dir, kv_store):
    actor = make_group(tiny_model_dir, 2, role="actor", name="ray_actor")
    config = actor_config(tiny_model_dir)
    config["rollout"]["checkpoint_engine"] = "ray"
    rollout = make_workers("rollout", RayClassWithInitArgs(InspectableRollout, config=config))
    rollout.init_model()
    try:
        actor.set_sync("ray")
        actor.update_actor(actor.compute_log_prob(put_trajectories(kv_store)))
        handle = actor.send_weights(3)
        rollout.receive_weights(handle, 3)
        assert rollout.weight_version() == [3]
        ones = torch.ones_like(IDS)
        diff = rollout.rollout_logits(IDS, ones)[0] - actor.actor_logits(IDS, ones)[0]
        assert diff.abs().max() < 1e-5
    finally:
        release(actor)
        release(rollout)


def test_trajectories_from_two_servers_match_the_actor_log_probs(tiny_model_dir, kv_store):
    hybrid = make_hybrid(tiny_model_dir, 2, name="agree")
    try:
        trajectories = hybrid.agent_loop.generate_sequences(*_prompts(kv_store, ["p0", "p1", "p2"]))
        assert trajectories.keys == ["p0_0_0", "p0_1_0", "p1_0_0", "p1_1_0", "p2_0_0", "p2_1_0"]
        stored = kv_store.kv_batch_get(
            trajectories.keys, "train", select_fields=["prompts", "responses", "response_mask"]
        )
        for prompt, response, mask, tag in zip(
            stored["prompts"].unbind(),
            stored["responses"].unbind(),
            stored["response_mask"].unbind(),
            trajectories.tags,
        ):
            assert prompt.tolist() in PROMPTS and 0 < response.numel() <= 6
            assert mask.tolist() == [1] * response.numel() and tag["num_turns"] == 1
            assert tag["min_weight_version"] == tag["max_weight_version"] == -1
        scored = hybrid.actor.compute_log_prob(trajectories)
        assert probs_diff(scored) < 1e-5
    finally:
        release_hybrid(hybrid)


def test_free_cache_engine_sleeps_after_generation_and_wakes_before_the_weight_sync(tiny_model_dir, kv_store):
    # The probe backend can sleep (and breaks loudly if misordered).
    hybrid = make_hybrid(tiny_model_dir, 1, name="sleepy", rollout_name="hf_sleep_probe", sleeps=True)
    try:
        hybrid.agent_loop.generate_sequences(*_prompts(kv_store, ["s0", "s1"]))
        assert hybrid.rollout.sleep_state() == [
            {"sleeps": True, "asleep": True, "events": ["generate", "sleep"]}
        ]
        hybrid.actor.update_actor(hybrid.actor.compute_log_prob(put_trajectories(kv_store)))  # while asleep
        hybrid.sync(1)
        trajectories = hybrid.agent_loop.generate_sequences(*_prompts(kv_store, ["s2", "s3"]))
        state = hybrid.rollout.sleep_state()[0]
        assert state["events"] == ["generate", "sleep", "wake_up", "load_weights", "generate", "sleep"]
        # Woken before the sync, so the served weights are the trained actor's (not the stale stash).
        assert probs_diff(hybrid.actor.compute_log_prob(trajectories)) < 1e-5
        assert {t["max_weight_version"] for t in trajectories.tags} == {1}
    finally:
        release_hybrid(hybrid)


def test_free_cache_engine_is_skipped_for_the_hf_backend_which_cannot_sleep(tiny_model_dir, kv_store):
    hybrid = make_hybrid(tiny_model_dir, 1, name="awake", sleeps=True)
    try:
        hybrid.agent_loop.generate_sequences(*_prompts(kv_store, ["a0", "a1"]))
        assert hybrid.rollout.sleep_state() == [{"sleeps": False, "asleep": False, "events": None}]
    finally:
        release_hybrid(hybrid)
