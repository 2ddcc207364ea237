"""Typed, validated configuration of the SFT and reward-model trainers (mirrors ``sft_trainer.yaml`` / ``rm_trainer.yaml``)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from verl_lite.trainer.checkpoint import RESUME_MODES
from verl_lite.trainer.config import RayConfig
from verl_lite.workers.config import EngineConfig, ModelConfig, OptimConfig, RLModelConfig

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EMBEDDED_MODEL = os.path.join(PACKAGE_DIR, "assets", "tiny_model")
EMBEDDED_DATA = os.path.join(PACKAGE_DIR, "assets", "synthetic")
SFT_MODES = ("chat", "pretrain")


@dataclass
class SupervisedDataConfig:
    """Files, split, lengths and batch geometry shared by SFT and reward-model training."""

    # Training rows: parquet or jsonl file (or a list of them); null = the embedded synthetic task.
    train_files: str | list[str] | None = None
    # Validation rows, same format; null = hold out val_ratio of the training rows.
    val_files: str | list[str] | None = None
    # Fraction of training rows held out for validation when val_files is null (0 disables validation).
    val_ratio: float = 0.02
    # Longest sequence in tokens (longer rows are right-truncated).
    max_length: int = 128
    # Rows per optimizer step over all data-parallel ranks (pairs for reward models).
    train_batch_size: int = 32
    # Rows per forward/backward on one rank; train_batch_size / (nnodes x n_gpus_per_node) / this =
    # accumulation steps (ignored with use_dynamic_bsz).
    micro_batch_size_per_gpu: int = 8
    # Shuffle training rows every epoch.
    shuffle: bool = True
    # Seed of the shuffle and of the train/val split.
    seed: int = 1


@dataclass
class SFTDataConfig(SupervisedDataConfig):
    """SFT data: chat rows (``messages``) or plain text (``text``)."""

    # "chat": loss on every assistant turn of ``messages``; "pretrain": loss on every real token of ``text``.
    mode: str = "chat"
    # Cut each rank's rows into micro-batches by a token budget instead of micro_batch_size_per_gpu rows.
    use_dynamic_bsz: bool = False
    # Token budget of one micro-batch on one rank with use_dynamic_bsz (a longer row gets one of its own).
    max_token_len_per_gpu: int = 8192


@dataclass
class RMDataConfig(SupervisedDataConfig):
    """Preference pairs: conversation form (chosen/rejected message lists) or prompt + chosen/rejected strings."""

    # Pairs generated from the embedded task when train_files is null (chosen correct, rejected wrong answer).
    synthetic_pairs: int = 256
    # A larger held-out share, smaller batches than SFT: pairs are few and each row is two sequences.
    val_ratio: float = 0.1
    train_batch_size: int = 16
    micro_batch_size_per_gpu: int = 4


@dataclass
class SupervisedTrainerConfig:
    """Run length, placement, logging, checkpoints and export."""

    # Project name shown by the loggers.
    project_name: str = "verl_lite"
    # Run name; metrics go to run_dir/experiment_name.
    experiment_name: str = "sft_tiny"
    # Loggers: any of console, jsonl, wandb, tensorboard, mlflow.
    logger: list[str] = field(default_factory=lambda: ["console", "jsonl"])
    # Passes over the training rows.
    total_epochs: int = 1
    # Stop after this many optimizer steps (null = total_epochs worth).
    total_training_steps: int | None = 30
    # Nodes of the worker pool (one placement group of n_gpus_per_node slots each, as main_ppo's).
    nnodes: int = 1
    # Worker processes (data-parallel ranks) on one node.
    n_gpus_per_node: int = 1
    # Validate every test_freq steps and at the end (<= 0: only at the end).
    test_freq: int = 10
    # Save a checkpoint every save_freq steps and after the last step (<= 0 disables), published
    # atomically as default_local_dir/global_step_N.
    save_freq: int = -1
    # Checkpoints and the final Hugging Face export (default_local_dir/hf) go here.
    default_local_dir: str = "outputs/sft"
    # Keep only the newest max_ckpt_to_keep checkpoints (null keeps all).
    max_ckpt_to_keep: int | None = None
    # auto: continue from the newest complete checkpoint in default_local_dir; disable: start fresh;
    # resume_path: continue from resume_from_path.
    resume_mode: str = "auto"
    # A global_step_N folder to continue from with resume_mode=resume_path.
    resume_from_path: str | None = None
    # Write a Hugging Face folder at the end of training.
    export_hf: bool = True
    # Folder of this run's metrics.
    run_dir: str = "outputs/runs"
    # Smoothing factor of the logged loss EMA (ema = decay * ema + (1 - decay) * loss).
    loss_ema_decay: float = 0.9


def _sft_optim() -> OptimConfig:
    return OptimConfig(
        lr=1e-4,
        weight_decay=0.01,
        betas=(0.9, 0.95),
        lr_scheduler="cosine",
        warmup_steps_ratio=0.1,
        min_lr_ratio=0.1,
    )


def _rm_optim() -> OptimConfig:
    return dataclasses.replace(_sft_optim(), lr=3e-4)


def _rm_trainer() -> SupervisedTrainerConfig:
    return SupervisedTrainerConfig(experiment_name="rm_tiny", default_local_dir="outputs/rm")


@dataclass
class SupervisedConfig:
    """Fields common to ``SFTConfig`` and ``RMConfig``; ``resolve`` fills nulls and checks combinations."""

    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=_sft_optim)
    engine: EngineConfig = field(default_factory=EngineConfig)
    trainer: SupervisedTrainerConfig = field(default_factory=SupervisedTrainerConfig)
    ray_kwargs: RayConfig = field(default_factory=RayConfig)

    @property
    def dp_size(self) -> int:
        """Data-parallel ranks: ``trainer.nnodes x trainer.n_gpus_per_node``."""
        return self.trainer.nnodes * self.trainer.n_gpus_per_node

    def __post_init__(self) -> None:
        if not self.model.path:
            self.model.path = EMBEDDED_MODEL
        data, trainer = self.data, self.trainer
        for key in ("nnodes", "n_gpus_per_node"):
            if getattr(trainer, key) < 1:
                raise ValueError(f"trainer.{key}={getattr(trainer, key)} must be >= 1.")
        dp = self.dp_size
        if data.train_batch_size % (dp * data.micro_batch_size_per_gpu):
            raise ValueError(
                f"data.train_batch_size={data.train_batch_size} must be a multiple of trainer.nnodes x "
                f"trainer.n_gpus_per_node x data.micro_batch_size_per_gpu = {dp * data.micro_batch_size_per_gpu}."
            )
        if trainer.resume_mode not in RESUME_MODES:
            raise ValueError(
                f"trainer.resume_mode={trainer.resume_mode!r} is not valid; use one of {list(RESUME_MODES)}."
            )
        if not 0.0 <= data.val_ratio < 1.0:
            raise ValueError(f"data.val_ratio={data.val_ratio} must be in [0, 1).")
        if data.max_length < 2:
            raise ValueError(f"data.max_length={data.max_length} must be at least 2 tokens.")
        if self.optim.lr_scheduler not in ("constant", "cosine"):
            raise ValueError(
                f"optim.lr_scheduler={self.optim.lr_scheduler!r} must be 'constant' or 'cosine'."
            )
        if not 0.0 <= trainer.loss_ema_decay < 1.0:
            raise ValueError(f"trainer.loss_ema_decay={trainer.loss_ema_decay} must be in [0, 1).")
        files = data.train_files if isinstance(data.train_files, list) else [data.train_files]
        for path in [*files, *(data.val_files if isinstance(data.val_files, list) else [data.val_files])]:
            if path and not os.path.exists(path):
                raise ValueError(f"data file {path!r} does not exist; set data.train_files / data.val_files.")


@dataclass
class SFTConfig(SupervisedConfig):
    """The whole SFT run (``configs/sft_trainer.yaml``)."""

    data: SFTDataConfig = field(default_factory=SFTDataConfig)
    # LoRA adapters and sequence packing, with main_ppo's keys (model.lora_rank, model.use_remove_padding).
    model: RLModelConfig = field(default_factory=RLModelConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        from verl_lite.trainer.validation import lora_problems

        if self.data.mode not in SFT_MODES:
            raise ValueError(f"data.mode={self.data.mode!r} must be one of {SFT_MODES}.")
        if self.data.use_dynamic_bsz and self.data.max_token_len_per_gpu < 1:
            raise ValueError(
                f"data.max_token_len_per_gpu={self.data.max_token_len_per_gpu} must be >= 1 with data.use_dynamic_bsz."
            )
        problems = lora_problems("model", self.model)
        if problems:
            raise ValueError(" ".join(problems))
        if not self.data.train_files:
            if self.data.mode != "chat":
                raise ValueError("data.mode=pretrain needs data.train_files with a 'text' column.")
            self.data.train_files = os.path.join(EMBEDDED_DATA, "sft.parquet")


@dataclass
class RMConfig(SupervisedConfig):
    """The whole reward-model run (``configs/rm_trainer.yaml``)."""

    data: RMDataConfig = field(default_factory=RMDataConfig)
    optim: OptimConfig = field(default_factory=_rm_optim)
    trainer: SupervisedTrainerConfig = field(default_factory=_rm_trainer)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.data.train_files and self.data.synthetic_pairs < 2:
            raise ValueError(
                f"data.synthetic_pairs={self.data.synthetic_pairs} must be >= 2 when data.train_files is null."
            )
