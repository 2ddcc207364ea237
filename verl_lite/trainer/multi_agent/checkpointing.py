"""CoMLRL's ``train()`` checkpoint arguments, checked and resolved to the checkpoint to resume
(verl_lite's one layout, ``trainer/checkpoint.py``, with every policy's shards)."""

from __future__ import annotations

import numbers
import os
from typing import Any

from verl_lite.trainer.checkpoint import (
    checkpoint_damage,
    find_latest_checkpoint,
    is_complete,
)


def checkpoint_to_resume(
    resume_from_checkpoint: str | bool | None,
    checkpoint_dir: str | None,
    checkpoint_interval: int,
    checkpoint_total_limit: int | None,
) -> str | None:
    """Check ``train()``'s checkpoint arguments (CoMLRL's contract) and return the folder to resume from.

    Args:
        resume_from_checkpoint: a complete checkpoint folder (``global_step_<n>``), True for the newest
            complete one under ``checkpoint_dir``, or None to start fresh.
        checkpoint_dir: where checkpoints are written (None: none are).
        checkpoint_interval: epochs between checkpoints, a positive integer.
        checkpoint_total_limit: how many checkpoints to keep (None keeps all), a positive integer.

    Raises:
        ValueError: one sentence naming the argument, its value and what is valid.
    """
    if not _positive_int(checkpoint_interval):
        raise ValueError(
            f"checkpoint_interval={checkpoint_interval!r} is not valid; use a positive integer (epochs "
            "between checkpoints)."
        )
    if checkpoint_total_limit is not None and not _positive_int(checkpoint_total_limit):
        raise ValueError(
            f"checkpoint_total_limit={checkpoint_total_limit!r} is not valid; use a positive integer or "
            "None (keep every checkpoint)."
        )
    if resume_from_checkpoint is None or resume_from_checkpoint is False:
        return None
    if resume_from_checkpoint is True:
        latest = find_latest_checkpoint(checkpoint_dir) if checkpoint_dir else None
        if latest is None:
            raise ValueError(
                f"resume_from_checkpoint=True found no complete checkpoint under checkpoint_dir="
                f"{checkpoint_dir!r}; pass a checkpoint folder, or None to start fresh."
            )
        path = latest
    else:
        path = os.fspath(resume_from_checkpoint)
    if not is_complete(path):
        raise ValueError(
            f"resume_from_checkpoint={path!r} is not a complete checkpoint (a global_step_<n> folder "
            "written by train(checkpoint_dir=...)); pass one, True for the newest, or None."
        )
    damage = checkpoint_damage(path)
    if damage:
        raise ValueError(f"resume_from_checkpoint={path!r} is damaged: {damage}; pass another checkpoint.")
    return path


def _positive_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1
