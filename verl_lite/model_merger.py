"""Turn a sharded training checkpoint into a Hugging Face folder that transformers and vLLM load.

    python -m verl_lite.model_merger --local_dir outputs/runs/grpo_tiny/checkpoints/global_step_40 \\
        --target_dir outputs/grpo_tiny_hf

``--local_dir`` is a trainer checkpoint (``global_step_N``, whose ``actor`` part is merged unless
``--part critic``) or an engine checkpoint folder itself. Runs in one process without Ray or a
process group: the shards are read and re-assembled by ``torch.distributed.checkpoint``.

A LoRA checkpoint (``model.lora_rank > 0``) holds the adapters only. By default they are merged
into the base model (read from the path the run trained from, or ``--base_model``) and the full
model is written; ``--adapter_only`` writes the PEFT adapter folder instead (``adapter_config.json``
+ ``adapter_model.safetensors``, for ``PeftModel.from_pretrained`` or vLLM's ``LoRARequest``).
An actor trained with a value head (``actor.value_head.enable``) gets it beside the model as ``value_head.pt``.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import torch
import torch.distributed.checkpoint as dcp

from verl_lite.workers.engine import HF_CONFIG_DIR
from verl_lite.workers.engine.value_head import VALUE_HEAD_FILE, is_value_head, split_value_head
from verl_lite.workers.lora import hf_name

PARTS = ("actor", "critic")
# Written next to the Hugging Face config by a LoRA engine: the adapter's PEFT config.
ADAPTER_CONFIG = "adapter_config.json"


def engine_checkpoint_dir(local_dir: str, part: str = "actor") -> str:
    """The engine checkpoint inside ``local_dir`` (itself, or its ``part`` subfolder of a trainer checkpoint)."""
    if part not in PARTS:
        raise ValueError(f"--part={part!r} is not valid; use one of {list(PARTS)}.")
    for candidate in (local_dir, os.path.join(local_dir, part)):
        if os.path.isfile(os.path.join(candidate, ".metadata")) and os.path.isdir(
            os.path.join(candidate, HF_CONFIG_DIR)
        ):
            return candidate
    raise FileNotFoundError(
        f"--local_dir={local_dir!r} holds no sharded checkpoint (.metadata and {HF_CONFIG_DIR}/ in it or in "
        f"its {part}/ folder); point it at a global_step_N folder written with trainer.save_freq > 0."
    )


def merge_checkpoint(
    local_dir: str,
    target_dir: str,
    part: str = "actor",
    adapter_only: bool = False,
    base_model: str | None = None,
) -> str:
    """Assemble the model from ``local_dir``'s shards and ``save_pretrained`` it (with tokenizer) to ``target_dir``.

    A LoRA checkpoint is merged into its base model, or written as the adapter alone with ``adapter_only``.
    """
    import transformers

    ckpt = engine_checkpoint_dir(local_dir, part)
    hf_dir = os.path.join(ckpt, HF_CONFIG_DIR)
    config = transformers.AutoConfig.from_pretrained(hf_dir)
    model_cls = getattr(transformers, (config.architectures or ["AutoModelForCausalLM"])[0])
    os.makedirs(target_dir, exist_ok=True)
    if os.path.isfile(os.path.join(hf_dir, ADAPTER_CONFIG)):
        model = _lora_model(ckpt, model_cls, config, adapter_only, base_model)
        (model if adapter_only else model.merge_and_unload()).save_pretrained(target_dir)
    else:
        if adapter_only:
            raise ValueError(f"--adapter_only needs a LoRA checkpoint; {ckpt!r} holds the full model.")
        with torch.device("meta"):
            model = model_cls(config)
        state = {name: torch.empty(t.shape, dtype=t.dtype) for name, t in model.state_dict().items()}
        _load_shards(state, ckpt)
        model.load_state_dict(state, assign=True)
        model.tie_weights()
        model.save_pretrained(target_dir, safe_serialization=True)
    head = _value_head_state(ckpt)
    if head:
        torch.save(head, os.path.join(target_dir, VALUE_HEAD_FILE))
    if os.path.isfile(os.path.join(hf_dir, "tokenizer_config.json")):
        transformers.AutoTokenizer.from_pretrained(hf_dir).save_pretrained(target_dir)
    return target_dir


def _load_shards(state: dict[str, torch.Tensor], ckpt: str) -> None:
    """Fill ``state``'s tensors (model-state names) from the checkpoint's shards, in this one process."""
    with warnings.catch_warnings():  # single-process loading is the point here, not a mistake
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load({"model": state}, checkpoint_id=ckpt, no_dist=True)


def _value_head_state(ckpt: str) -> dict[str, torch.Tensor]:
    """The value head's ``state_dict`` in the checkpoint (an actor with ``actor.value_head``), or {}."""
    stored = dcp.FileSystemReader(ckpt).read_metadata().state_dict_metadata
    state = {
        name.removeprefix("model."): torch.empty(tuple(meta.size), dtype=meta.properties.dtype)
        for name, meta in stored.items()
        if name.startswith("model.") and is_value_head(hf_name(name.removeprefix("model.")))
    }
    if state:
        _load_shards(state, ckpt)
    return split_value_head({hf_name(name): t for name, t in state.items()})[1]


def _lora_model(ckpt: str, model_cls, config, adapter_only: bool, base_model: str | None):
    """The PEFT model of a LoRA checkpoint: its adapters on the base weights (on ``meta`` for ``adapter_only``)."""
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig.from_pretrained(os.path.join(ckpt, HF_CONFIG_DIR))
    if adapter_only:
        config.name_or_path = lora.base_model_name_or_path  # what the exported adapter names as its base
        with torch.device("meta"):
            base = model_cls(config)
    else:
        base_path = base_model or lora.base_model_name_or_path
        if not base_path or not os.path.isdir(base_path):
            raise FileNotFoundError(
                f"the LoRA checkpoint's base model {base_path!r} is not a folder here; pass --base_model "
                "(the model the run trained from), or --adapter_only to export the adapter alone."
            )
        # the checkpoint's config: a value model's num_labels=1 head, not the base's
        base = model_cls.from_pretrained(base_path, config=config, dtype=torch.float32)
    model = get_peft_model(base, lora)
    trained = {n: torch.empty(p.shape, dtype=p.dtype) for n, p in model.named_parameters() if p.requires_grad}
    _load_shards(trained, ckpt)
    model.load_state_dict(trained, strict=False, assign=adapter_only)
    return model


def main(argv: list[str] | None = None) -> int:
    """Command line: merge ``--local_dir`` into ``--target_dir``; exit 2 with one sentence on bad input."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local_dir", required=True, help="global_step_N folder (or its actor/critic part)")
    parser.add_argument("--target_dir", required=True, help="where to write the Hugging Face folder")
    parser.add_argument("--part", default="actor", choices=PARTS, help="which model of a trainer checkpoint")
    parser.add_argument(
        "--adapter_only",
        action="store_true",
        help="LoRA checkpoints: write the PEFT adapter, not the merged model",
    )
    parser.add_argument(
        "--base_model", help="LoRA checkpoints: the base model folder (default: the run's model.path)"
    )
    args = parser.parse_args(argv)
    try:
        out = merge_checkpoint(args.local_dir, args.target_dir, args.part, args.adapter_only, args.base_model)
    except (FileNotFoundError, ValueError) as err:
        print(f"model_merger: {err}", file=sys.stderr)
        return 2
    print(f"model_merger: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
