"""The vLLM rollout backend inside a Ray worker: generation, in-place weight sync, matching log-probs."""

import pytest
import torch
from tensordict import TensorDict

from tests.workers.helpers import PROMPTS, jagged, make_group, put_trajectories, release
from verl_lite.workers.actor_rollout_ref import rollout_probs_diff_mean

# Needs vLLM; tests/conftest.py fails it when vLLM is part of the set-up but broken.
pytestmark = pytest.mark.vllm


def test_vllm_rollout_after_weight_sync_matches_actor_log_probs(tiny_model_dir, kv_store):
    group = make_group(tiny_model_dir, 1, role="actor_rollout", name="vllm", rollout_name="vllm")
    try:
        group.update_actor(group.compute_log_prob(put_trajectories(kv_store)))  # actor now differs from disk
        group.update_weights(5)
        assert group.weight_version() == [5]
        prompts = kv_store.kv_batch_put(["v0", "v1"], "train", tags=[{"uid": "v0"}, {"uid": "v1"}])
        kv_store.kv_batch_put(prompts.keys, "train", fields=TensorDict({"prompts": jagged(PROMPTS[:2])}, [2]))
        trajectories = group.generate_sequences(prompts)
        assert sorted(trajectories.keys) == ["v0_0_0", "v0_1_0", "v1_0_0", "v1_1_0"]
        assert all(0 < t["response_len"] <= 6 for t in trajectories.tags)
        # vLLM's log-probs of its own samples equal the trained actor's: the new weights arrived in place.
        assert rollout_probs_diff_mean(group.compute_log_prob(trajectories)) < 1e-5
        # vLLM's sleep mode is CUDA-only: on CPU free_cache_engine (on by default) is skipped, never half-done.
        if not torch.cuda.is_available():
            assert group.rollout_sleep_state()[0]["sleeps"] is False
    finally:
        release(group)


def test_vllm_serves_a_lora_actors_adapter_and_then_matches_its_log_probs(tiny_model_dir, kv_store):
    group = make_group(
        tiny_model_dir, 1, role="actor_rollout", name="vllm_lora", rollout_name="vllm", model={"lora_rank": 4}
    )
    try:
        for version in (1, 2):  # the second sync reloads the adapter in place
            # two updates: the first moves only lora_B (it starts at 0), the second lora_A as well
            meta = group.compute_log_prob(put_trajectories(kv_store))
            group.update_actor(meta)
            group.update_actor(group.compute_log_prob(meta))
            group.update_weights(version)
            uids = [f"l{version}_0", f"l{version}_1"]
            prompts = kv_store.kv_batch_put(uids, "train", tags=[{"uid": u} for u in uids])
            kv_store.kv_batch_put(uids, "train", fields=TensorDict({"prompts": jagged(PROMPTS[:2])}, [2]))
            trajectories = group.generate_sequences(prompts)
            # vLLM's log-probs of its own samples (base weights + the served adapter) equal the actor's.
            assert rollout_probs_diff_mean(group.compute_log_prob(trajectories)) < 1e-5
    finally:
        release(group)
