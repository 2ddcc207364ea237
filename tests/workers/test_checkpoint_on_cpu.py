"""Sharded checkpoints restore weights and optimizer state exactly; the HF export loads in transformers."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.workers.helpers import make_group, put_trajectories, release
from verl_lite import model_merger


def flatten(state, prefix=""):
    if isinstance(state, torch.Tensor):
        return {prefix: state}
    if isinstance(state, dict):
        return {k: v for key, sub in state.items() for k, v in flatten(sub, f"{prefix}/{key}").items()}
    return {}


def test_save_then_load_restores_weights_and_optimizer_state(tiny_model_dir, kv_store, tmp_path):
    group = make_group(tiny_model_dir, 2, role="actor", name="ckpt")
    try:
        group.update_actor(group.compute_log_prob(put_trajectories(kv_store)))
        group.save_checkpoint(str(tmp_path / "step1"), hf_path=str(tmp_path / "hf"))
        saved_weights, saved_optim = group.full_weights(), flatten(group.optimizer_state())
        group.update_actor(
            group.compute_log_prob(put_trajectories(kv_store))
        )  # move away from the checkpoint
        assert any(not torch.equal(saved_weights[k], v) for k, v in group.full_weights().items())
        group.load_checkpoint(str(tmp_path / "step1"))
        restored_weights, restored_optim = group.full_weights(), flatten(group.optimizer_state())
    finally:
        release(group)
    assert all(torch.equal(saved_weights[k], v) for k, v in restored_weights.items())
    assert saved_optim.keys() == restored_optim.keys() and len(saved_optim) > 0
    assert all(torch.equal(saved_optim[k], restored_optim[k]) for k in saved_optim)
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    assert all(torch.equal(exported.state_dict()[k], saved_weights[k]) for k in saved_weights)
    assert AutoTokenizer.from_pretrained(tmp_path / "hf").eos_token == "<eos>"
    # The offline merger rebuilds the same model from the two ranks' shards, without Ray or a process group.
    assert (
        model_merger.main(["--local_dir", str(tmp_path / "step1"), "--target_dir", str(tmp_path / "merged")])
        == 0
    )
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    assert all(torch.equal(merged.state_dict()[k], saved_weights[k]) for k in saved_weights)
    assert AutoTokenizer.from_pretrained(tmp_path / "merged").eos_token == "<eos>"


def test_merger_rejects_a_folder_without_shards(tmp_path, capsys):
    assert model_merger.main(["--local_dir", str(tmp_path), "--target_dir", str(tmp_path / "out")]) == 2
    assert f"--local_dir={str(tmp_path)!r} holds no sharded checkpoint" in capsys.readouterr().err
