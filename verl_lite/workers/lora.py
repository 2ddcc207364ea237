"""LoRA adapters: wrap a model with PEFT, name its adapter tensors, and fold adapters into base weights.

The training engine wraps its model (``model.lora_rank > 0``); only the adapters train, travel to
the rollout and go into checkpoints. On the wire an adapter is two tensors in Hugging Face module
naming, with the LoRA scaling already folded into ``B``::

    model.layers.0.self_attn.q_proj.lora_A.weight   (rank, in_features)
    model.layers.0.self_attn.q_proj.lora_B.weight   (out_features, rank) = B * lora_alpha / lora_rank

so a receiver needs no LoRA config to merge: ``W = W_base + lora_B @ lora_A``
(Hu et al., 2021, https://arxiv.org/abs/2106.09685).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

# PEFT's prefix in front of the wrapped model's own parameter names, and its adapter name.
PEFT_PREFIX = "base_model.model."
ADAPTER = "default"
# Heads of a value model (AutoModelForTokenClassification): trained in full next to the adapters.
VALUE_HEADS = ("score", "classifier")
LORA_A, LORA_B = ".lora_A.weight", ".lora_B.weight"


def lora_scaling(lora_alpha: float, lora_rank: int) -> float:
    """PEFT's multiplier of ``B @ A`` (``lora_alpha / r``)."""
    return float(lora_alpha) / float(lora_rank)


def wrap_with_lora(model: torch.nn.Module, model_config: Any, kind: str) -> torch.nn.Module:
    """The PEFT model around ``model``: adapters on ``target_modules``, everything else frozen.

    A value model's scalar head is new, so it trains in full (PEFT ``modules_to_save``) and gets no
    adapter of its own.
    """
    from peft import LoraConfig, get_peft_model

    heads = [name for name in VALUE_HEADS if kind == "value" and hasattr(model, name)]
    target = model_config.target_modules
    config = LoraConfig(
        r=model_config.lora_rank,
        lora_alpha=model_config.lora_alpha,
        lora_dropout=model_config.lora_dropout,
        target_modules=target if isinstance(target, str) else list(target),
        exclude_modules=heads or None,
        modules_to_save=heads or None,
        bias="none",
    )
    return get_peft_model(model, config)


def hf_name(peft_name: str) -> str:
    """A PEFT parameter name in the wrapped model's own naming (adapter tensors keep ``lora_A``/``lora_B``)."""
    name = peft_name.removeprefix(PEFT_PREFIX)
    for part in (".base_layer", f".modules_to_save.{ADAPTER}", f".{ADAPTER}"):
        name = name.replace(part, "")
    return name


def is_adapter(name: str) -> bool:
    """Whether ``name`` (either naming) is a LoRA ``A`` or ``B`` matrix."""
    return ".lora_A." in name or ".lora_B." in name


def adapter_tensors(
    named_tensors: Iterable[tuple[str, torch.Tensor]], scaling: float
) -> Iterator[tuple[str, torch.Tensor]]:
    """The wire form of a PEFT model's trainable tensors: adapters with ``B`` pre-scaled, full heads as is."""
    for name, tensor in named_tensors:
        if ".lora_B." in name:
            tensor = tensor * scaling
        yield hf_name(name), tensor


def merge_adapters(
    named_tensors: Iterable[tuple[str, torch.Tensor]], base_weight: Callable[[str], torch.Tensor]
) -> Iterator[tuple[str, torch.Tensor]]:
    """Turn wire-form adapters into merged weights ``(module.weight, W_base + B @ A)``; pass others through.

    Args:
        named_tensors: wire-form pairs (see the module docstring); a module's ``A`` and ``B`` may
            come in either order, other tensors (full weights, value heads) pass unchanged.
        base_weight: the unmerged base weight (out_features, in_features) under a ``.weight`` name.
    """
    pending: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in named_tensors:
        if not is_adapter(name):
            yield name, tensor
            continue
        module = name.removesuffix(LORA_A).removesuffix(LORA_B)
        pair = pending.setdefault(module, {})
        pair["A" if name.endswith(LORA_A) else "B"] = tensor
        if len(pair) == 2:
            del pending[module]
            base = base_weight(f"{module}.weight")
            delta = pair["B"].to(base.device, torch.float32) @ pair["A"].to(base.device, torch.float32)
            yield f"{module}.weight", (base.float() + delta).to(base.dtype)
    if pending:
        raise ValueError(f"adapters without their other half (lora_A / lora_B): {sorted(pending)}.")


def merged_state_dict(peft_state: dict[str, torch.Tensor], scaling: float) -> dict[str, torch.Tensor]:
    """The wrapped model's full state dict in its own naming with every adapter merged in.

    Args:
        peft_state: a PEFT model's full state dict (``base_layer``, ``lora_A/B.default``,
            ``original_module`` / ``modules_to_save`` names).
    """
    # A trained value head (modules_to_save) replaces its original_module copy.
    plain = {
        hf_name(k): v for k, v in peft_state.items() if not is_adapter(k) and ".original_module." not in k
    }
    adapters = adapter_tensors(((k, v) for k, v in peft_state.items() if is_adapter(k)), scaling)
    plain.update(merge_adapters(adapters, plain.__getitem__))
    return plain


def save_adapter_folder(path: str, adapters: Iterable[tuple[str, torch.Tensor]], base_model: str) -> int:
    """Write wire-form adapters as a PEFT adapter folder (what vLLM's ``LoRARequest`` loads); returns the rank.

    ``lora_B`` already carries the scaling, so the folder declares ``lora_alpha = r`` (scaling 1).
    """
    from safetensors.torch import save_file

    tensors = {PEFT_PREFIX + name: t.detach().to("cpu").contiguous() for name, t in adapters}
    ranks = {t.shape[0] for name, t in tensors.items() if name.endswith(LORA_A)}
    if len(ranks) != 1:
        raise ValueError(f"adapters must share one rank, got {sorted(ranks)}.")
    rank = ranks.pop()
    modules = sorted(
        {name.removesuffix(LORA_A).rsplit(".", 1)[-1] for name in tensors if name.endswith(LORA_A)}
    )
    config = {
        "peft_type": "LORA",
        "r": rank,
        "lora_alpha": rank,
        "target_modules": modules,
        "bias": "none",
        "base_model_name_or_path": base_model,
    }
    os.makedirs(path, exist_ok=True)
    save_file(tensors, os.path.join(path, "adapter_model.safetensors"))
    with open(os.path.join(path, "adapter_config.json"), "w") as f:
        json.dump(config, f)
    return rank
