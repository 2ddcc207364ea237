"""Entry point: ``python -m verl_lite.main_sft [hydra overrides]`` fine-tunes a causal LM, data-parallel on Ray.

Chat rows (``messages``) train on every assistant turn; ``data.mode=pretrain`` trains on every
token of a ``text`` column. The config is built and validated before Ray starts; the process exits
non-zero with a one-line message when anything fails.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig


def load_config(cfg: DictConfig):
    """Typed, defaults-resolved and validated config from Hydra's ``cfg``."""
    from verl_lite.trainer.sft.config import SFTConfig
    from verl_lite.utils.config import from_config

    return from_config(SFTConfig, cfg)


def build_sft_data(config, tokenizer):
    """Tokenized train/val examples (prompt masked with -100 in chat mode) and skip counts."""
    from verl_lite.data.files import read_rows
    from verl_lite.data.sft_dataset import SFTDataset, collate_sft
    from verl_lite.trainer.sft.data import train_val_rows
    from verl_lite.trainer.sft.sft_trainer import SupervisedData

    data = config.data
    rows = read_rows(data.train_files)
    train_rows, val_rows = train_val_rows(rows, data)
    train = SFTDataset(train_rows, tokenizer, data.max_length, data.mode)
    val = SFTDataset(val_rows, tokenizer, data.max_length, data.mode)
    stats = {
        "train_rows": len(train),
        "val_rows": len(val),
        "skipped_truncated": train.num_truncated + val.num_truncated,
    }
    if stats["skipped_truncated"]:
        print(
            f"verl_lite: skipped {stats['skipped_truncated']} rows whose target was truncated away "
            f"(data.max_length={data.max_length}).",
            file=sys.stderr,
        )
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return SupervisedData(train.examples, val.examples, collate_sft, pad_id, stats)


def run(config) -> list[dict]:
    """Train with ``SFTWorker``s; starts (and shuts down) Ray unless it is already running."""
    from verl_lite.trainer.sft.runner import run_supervised
    from verl_lite.trainer.sft.sft_worker import SFTWorker

    return run_supervised(config, SFTWorker, lambda tokenizer: build_sft_data(config, tokenizer))


@hydra.main(config_path="configs", config_name="sft_trainer", version_base=None)
def main(cfg: DictConfig) -> None:
    from verl_lite.utils.cli import run_cli

    run_cli(cfg, load_config, run)


if __name__ == "__main__":
    main()
