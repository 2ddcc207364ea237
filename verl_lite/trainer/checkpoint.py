"""Where checkpoints live on disk, how they are published atomically, found again and pruned.

Layout under ``trainer.default_local_dir``::

    global_step_4/
        actor/                 sharded model + optimizer (torch.distributed.checkpoint), scheduler, RNG
        actor/huggingface/     config and tokenizer, so ``model_merger`` can rebuild the HF model
        critic/                same, for the value model (PPO with gae)
        trainer_state.pt       global step, dataloader position, KL controller, replay buffer, history
        COMPLETE               written last: a folder without it is never resumed from
    latest_checkpointed_iteration.txt

A checkpoint is written into ``global_step_4.partial`` and renamed to ``global_step_4`` only once
every part is on disk, so a crash mid-save leaves a folder ``auto`` resume ignores. Only the
filesystem is touched here; the trainer asks the workers to write their shards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from typing import Any

import torch

COMPLETE_MARKER = "COMPLETE"
TRAINER_STATE = "trainer_state.pt"
LATEST_FILE = "latest_checkpointed_iteration.txt"
PARTIAL_SUFFIX = ".partial"
RESUME_MODES = ("auto", "disable", "resume_path")
_STEP_DIR = re.compile(r"^global_step_(\d+)$")


def step_dir_name(step: int) -> str:
    """Folder name of the checkpoint taken after ``step``."""
    return f"global_step_{step}"


def is_complete(path: str) -> bool:
    """Whether ``path`` is a fully written checkpoint (its completion marker exists)."""
    return os.path.isfile(os.path.join(path, COMPLETE_MARKER))


def complete_checkpoints(root: str) -> list[tuple[int, str]]:
    """``(step, path)`` of every complete checkpoint under ``root``, oldest first."""
    if not os.path.isdir(root):
        return []
    found = []
    for name in os.listdir(root):
        match = _STEP_DIR.match(name)
        path = os.path.join(root, name)
        if match and is_complete(path):
            found.append((int(match.group(1)), path))
    return sorted(found)


def find_latest_checkpoint(root: str) -> str | None:
    """The newest complete checkpoint under ``root`` (half-written folders are skipped), or None."""
    found = complete_checkpoints(root)
    return found[-1][1] if found else None


def resolve_resume_path(resume_mode: str, root: str, resume_from_path: str | None) -> str | None:
    """The checkpoint a run starts from: newest complete one (``auto``), none, or the one named."""
    if resume_mode not in RESUME_MODES:
        raise ValueError(
            f"trainer.resume_mode={resume_mode!r} is not valid; use one of {list(RESUME_MODES)}."
        )
    if resume_mode == "disable":
        return None
    if resume_mode == "auto":
        return find_latest_checkpoint(root)
    if not resume_from_path or not is_complete(resume_from_path):
        raise ValueError(
            f"trainer.resume_from_path={resume_from_path!r} is not a complete checkpoint "
            f"(a global_step_N folder holding {COMPLETE_MARKER}); pick one under {root!r}."
        )
    return resume_from_path


class CheckpointWriter:
    """Writes one checkpoint: parts go into a ``.partial`` folder that ``publish`` renames into place.

    Args:
        root: ``trainer.default_local_dir``.
        step: the global step just finished.
    """

    def __init__(self, root: str, step: int):
        self.root = os.path.abspath(root)
        self.step = step
        self.final_path = os.path.join(self.root, step_dir_name(step))
        self.path = self.final_path + PARTIAL_SUFFIX
        shutil.rmtree(self.path, ignore_errors=True)
        os.makedirs(self.path)

    def part(self, name: str) -> str:
        """Folder for one part (``actor``, ``critic``) inside the checkpoint being written."""
        return os.path.join(self.path, name)

    def save_trainer_state(self, state: dict[str, Any]) -> None:
        """The controller's own state (step, dataloader, KL controller, buffer, history, RNG)."""
        torch.save(state, os.path.join(self.path, TRAINER_STATE))

    def publish(self) -> str:
        """Mark complete, move into place (replacing an older copy of this step) and update the pointer."""
        with open(os.path.join(self.path, COMPLETE_MARKER), "w") as f:
            json.dump({"global_step": self.step, "time": time.time()}, f)
        if os.path.exists(self.final_path):
            shutil.rmtree(self.final_path)
        os.replace(self.path, self.final_path)
        pointer = os.path.join(self.root, LATEST_FILE)
        with open(pointer + ".tmp", "w") as f:
            f.write(str(self.step))
        os.replace(pointer + ".tmp", pointer)
        return self.final_path


def load_trainer_state(path: str) -> dict[str, Any]:
    """The controller state stored in checkpoint folder ``path``."""
    return torch.load(os.path.join(path, TRAINER_STATE), weights_only=False)


def prune_checkpoints(root: str, max_to_keep: int | None) -> list[str]:
    """Delete the oldest complete checkpoints beyond ``max_to_keep`` (None or <= 0 keeps all)."""
    if not max_to_keep or max_to_keep <= 0:
        return []
    found = complete_checkpoints(root)
    removed = [path for _, path in found[:-max_to_keep]]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed
