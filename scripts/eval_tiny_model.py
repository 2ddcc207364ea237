"""Print a model's greedy and sampled (n=8, temperature 1) accuracy on the synthetic val split.

.venv/bin/python scripts/eval_tiny_model.py [--model_dir DIR] [--data_dir DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl_lite.data.task_eval import evaluate_accuracy

ASSETS = Path(__file__).resolve().parents[1] / "verl_lite" / "assets"


def main() -> None:
    """Load the model and the val split, then measure both accuracies."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model_dir", default=str(ASSETS / "tiny_model"))
    p.add_argument("--data_dir", default=str(ASSETS / "synthetic"))
    p.add_argument("--max_new_tokens", type=int, default=48)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir)
    rows = pd.read_parquet(Path(args.data_dir) / "val.parquet").to_dict("records")
    greedy = evaluate_accuracy(model, tokenizer, rows, args.max_new_tokens)
    sampled = evaluate_accuracy(model, tokenizer, rows, args.max_new_tokens, n=8, temperature=1.0)
    print(f"val ({len(rows)} prompts): greedy {greedy:.3f}, sampled (n=8, T=1) {sampled:.3f}")


if __name__ == "__main__":
    main()
