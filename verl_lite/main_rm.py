"""Entry point: ``python -m verl_lite.main_rm [hydra overrides]`` trains a Bradley-Terry reward model on Ray.

Preference pairs come in conversation form (``chosen`` / ``rejected`` message lists) or as
``prompt`` + ``chosen`` / ``rejected`` strings; with no files, pairs are generated from the embedded
synthetic task. The result is exported as an ``AutoModelForSequenceClassification`` (num_labels=1).
"""

from __future__ import annotations

import os
import sys

import hydra
from omegaconf import DictConfig


def load_config(cfg: DictConfig):
    """Typed, defaults-resolved and validated config from Hydra's ``cfg``."""
    from verl_lite.trainer.sft.config import RMConfig
    from verl_lite.utils.config import from_config

    return from_config(RMConfig, cfg)


def build_rm_data(config, tokenizer):
    """Tokenized train/val pairs; pairs identical after truncation are dropped and counted."""
    from verl_lite.data.files import read_rows
    from verl_lite.data.rm_dataset import PreferenceDataset, collate_preference
    from verl_lite.trainer.sft.config import EMBEDDED_DATA
    from verl_lite.trainer.sft.data import train_val_rows
    from verl_lite.trainer.sft.preference_pairs import synthetic_preference_rows
    from verl_lite.trainer.sft.sft_trainer import SupervisedData

    data = config.data
    if data.train_files:
        rows = read_rows(data.train_files)
    else:
        rows = synthetic_preference_rows(
            os.path.join(EMBEDDED_DATA, "train.parquet"), data.synthetic_pairs, data.seed
        )
    train_rows, val_rows = train_val_rows(rows, data)
    train = PreferenceDataset(train_rows, tokenizer, data.max_length)
    val = PreferenceDataset(val_rows, tokenizer, data.max_length)
    stats = {
        "train_pairs": len(train),
        "val_pairs": len(val),
        "dropped_identical": train.num_identical_dropped + val.num_identical_dropped,
    }
    if stats["dropped_identical"]:
        print(
            f"verl_lite: dropped {stats['dropped_identical']} pairs identical after truncation "
            f"(data.max_length={data.max_length}).",
            file=sys.stderr,
        )
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return SupervisedData(train.pairs, val.pairs, collate_preference, pad_id, stats)


def run(config) -> list[dict]:
    """Train with ``RMWorker``s; starts (and shuts down) Ray unless it is already running."""
    from verl_lite.trainer.sft.rm_worker import RMWorker
    from verl_lite.trainer.sft.runner import run_supervised

    return run_supervised(config, RMWorker, lambda tokenizer: build_rm_data(config, tokenizer))


@hydra.main(config_path="configs", config_name="rm_trainer", version_base=None)
def main(cfg: DictConfig) -> None:
    from verl_lite.utils.cli import run_cli

    run_cli(cfg, load_config, run)


if __name__ == "__main__":
    main()
