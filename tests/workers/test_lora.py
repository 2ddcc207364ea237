"""The LoRA wire form and merges of verl_lite.workers.lora, on hand-sized matrices."""

import pytest
import torch

from verl_lite.workers.lora import adapter_tensors, hf_name, merge_adapters, merged_state_dict

PEFT = "base_model.model."


def test_peft_names_become_the_wrapped_models_own_names():
    assert hf_name(PEFT + "model.layers.0.q_proj.base_layer.weight") == "model.layers.0.q_proj.weight"
    assert (
        hf_name(PEFT + "model.layers.0.q_proj.lora_A.default.weight") == "model.layers.0.q_proj.lora_A.weight"
    )
    assert hf_name(PEFT + "score.modules_to_save.default.bias") == "score.bias"


def test_merge_adds_b_times_a_to_the_base_whatever_order_the_pair_comes_in():
    base = {"q.weight": torch.tensor([[1.0, 0.0], [0.0, 1.0]])}
    a, b = torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0], [4.0]])  # rank 1: B @ A = [[3, 6], [4, 8]]
    for pairs in (
        [("q.lora_A.weight", a), ("q.lora_B.weight", b)],
        [("q.lora_B.weight", b), ("q.lora_A.weight", a)],
    ):
        merged = dict(merge_adapters([("e.weight", torch.ones(1)), *pairs], base.__getitem__))
        assert merged["q.weight"].tolist() == [[4.0, 6.0], [4.0, 9.0]]
        assert merged["e.weight"].tolist() == [1.0]  # a full tensor passes through


def test_the_wire_form_folds_the_scaling_into_b_and_a_lone_half_is_an_error():
    wire = dict(adapter_tensors([(PEFT + "q.lora_B.default.weight", torch.ones(2, 1))], scaling=2.0))
    assert list(wire) == ["q.lora_B.weight"] and wire["q.lora_B.weight"].tolist() == [[2.0], [2.0]]
    with pytest.raises(ValueError, match=r"adapters without their other half .*\['q'\]"):
        list(merge_adapters([("q.lora_A.weight", torch.ones(1, 2))], lambda name: torch.eye(2)))


def test_merged_state_dict_keeps_a_trained_head_and_drops_its_original():
    state = {
        PEFT + "q.base_layer.weight": torch.zeros(2, 2),
        PEFT + "q.lora_A.default.weight": torch.tensor([[1.0, 1.0]]),
        PEFT + "q.lora_B.default.weight": torch.tensor([[1.0], [0.0]]),
        PEFT + "score.original_module.weight": torch.zeros(1, 2),
        PEFT + "score.modules_to_save.default.weight": torch.ones(1, 2),
    }
    merged = merged_state_dict(state, scaling=0.5)  # 0.5 * [[1], [0]] @ [[1, 1]] = [[0.5, 0.5], [0, 0]]
    assert sorted(merged) == ["q.weight", "score.weight"]
    assert merged["q.weight"].tolist() == [[0.5, 0.5], [0.0, 0.0]] and merged["score.weight"].tolist() == [
        [1.0, 1.0]
    ]
