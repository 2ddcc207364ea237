"""Learning-rate schedules: constant, or linear warmup followed by cosine decay."""

from __future__ import annotations

import math

import torch

from verl_lite.workers.config import OptimConfig

LR_SCHEDULES = ("constant", "cosine")


def warmup_steps(config: OptimConfig) -> int:
    """Warmup length in optimizer steps (explicit, or a ratio of the run)."""
    if config.warmup_steps >= 0:
        return config.warmup_steps
    return int(config.warmup_steps_ratio * config.total_training_steps)


def lr_multiplier(step: int, config: OptimConfig) -> float:
    """Factor applied to the peak learning rate at optimizer step ``step`` (0-based)."""
    warmup = warmup_steps(config)
    if step < warmup:
        return (step + 1) / warmup
    if config.lr_scheduler == "constant":
        return 1.0
    if config.lr_scheduler != "cosine":
        raise ValueError(f"optim.lr_scheduler={config.lr_scheduler!r} is not one of {LR_SCHEDULES}.")
    decay_steps = max(1, config.total_training_steps - warmup)
    progress = min(1.0, (step - warmup) / decay_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return config.min_lr_ratio + (1.0 - config.min_lr_ratio) * cosine


def build_scheduler(
    optimizer: torch.optim.Optimizer, config: OptimConfig
) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` following :func:`lr_multiplier`."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_multiplier(step, config))
