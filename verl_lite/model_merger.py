"""Turn a sharded training checkpoint into a Hugging Face folder that transformers and vLLM load.

    python -m verl_lite.model_merger --local_dir outputs/runs/grpo_tiny/checkpoints/global_step_40 \\
        --target_dir outputs/grpo_tiny_hf

``--local_dir`` is a trainer checkpoint (``global_step_N``, whose ``actor`` part is merged unless
``--part critic``) or an engine checkpoint folder itself. Runs in one process without Ray or a
process group: the shards are read and re-assembled by ``torch.distributed.checkpoint``.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import torch
import torch.distributed.checkpoint as dcp

from verl_lite.workers.engine import HF_CONFIG_DIR

PARTS = ("actor", "critic")


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


def merge_checkpoint(local_dir: str, target_dir: str, part: str = "actor") -> str:
    """Assemble the full model from ``local_dir``'s shards and ``save_pretrained`` it (with tokenizer) to ``target_dir``."""
    import transformers

    ckpt = engine_checkpoint_dir(local_dir, part)
    hf_dir = os.path.join(ckpt, HF_CONFIG_DIR)
    config = transformers.AutoConfig.from_pretrained(hf_dir)
    model_cls = getattr(transformers, (config.architectures or ["AutoModelForCausalLM"])[0])
    with torch.device("meta"):
        model = model_cls(config)
    state = {name: torch.empty(t.shape, dtype=t.dtype) for name, t in model.state_dict().items()}
    with warnings.catch_warnings():  # single-process loading is the point here, not a mistake
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load({"model": state}, checkpoint_id=ckpt, no_dist=True)
    model.load_state_dict(state, assign=True)
    model.tie_weights()
    os.makedirs(target_dir, exist_ok=True)
    model.save_pretrained(target_dir, safe_serialization=True)
    if os.path.isfile(os.path.join(hf_dir, "tokenizer_config.json")):
        transformers.AutoTokenizer.from_pretrained(hf_dir).save_pretrained(target_dir)
    return target_dir


def main(argv: list[str] | None = None) -> int:
    """Command line: merge ``--local_dir`` into ``--target_dir``; exit 2 with one sentence on bad input."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local_dir", required=True, help="global_step_N folder (or its actor/critic part)")
    parser.add_argument("--target_dir", required=True, help="where to write the Hugging Face folder")
    parser.add_argument("--part", default="actor", choices=PARTS, help="which model of a trainer checkpoint")
    args = parser.parse_args(argv)
    try:
        out = merge_checkpoint(args.local_dir, args.target_dir, args.part)
    except (FileNotFoundError, ValueError) as err:
        print(f"model_merger: {err}", file=sys.stderr)
        return 2
    print(f"model_merger: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
