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
import random
import re
import shutil
import time
import zipfile
from typing import Any

import numpy as np
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


def checkpoint_damage(path: str) -> str | None:
    """Why the complete checkpoint ``path`` cannot be loaded (a file empty, truncated or unreadable), or None.

    Cheap enough to run before Ray starts: the small trainer state is loaded, the other ``.pt`` files
    are opened as the zip archives ``torch.save`` writes (a truncated one has lost its directory at
    the end), every ``.distcp`` shard must be as long as its folder's ``.metadata`` says, and json
    files must parse. Model shards are not read.
    """
    for folder, _, names in os.walk(path):
        if ".metadata" in names:
            short = _shard_problem(folder)
            if short:
                return short
        for name in names:
            file = os.path.join(folder, name)
            if os.path.getsize(file) == 0:
                return f"{file!r} is empty"
            try:
                if name == TRAINER_STATE:
                    torch.load(file, map_location="cpu", weights_only=False)
                elif name.endswith(".pt"):
                    with zipfile.ZipFile(file):
                        pass
                elif name.endswith(".json"):
                    with open(file) as f:
                        json.load(f)
            except Exception as err:  # torch, zipfile and json each raise their own types
                return f"{file!r} is unreadable ({type(err).__name__}: {err})"
    return None


def _shard_problem(folder: str) -> str | None:
    """A ``torch.distributed.checkpoint`` shard shorter than its ``.metadata`` records, or None."""
    from torch.distributed.checkpoint import FileSystemReader

    try:
        storage = FileSystemReader(folder).read_metadata().storage_data
    except Exception as err:  # a damaged .metadata is a pickle error of some kind
        return f"{os.path.join(folder, '.metadata')!r} is unreadable ({type(err).__name__}: {err})"
    needed: dict[str, int] = {}
    for info in storage.values():
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    for name, size in sorted(needed.items()):
        file = os.path.join(folder, name)
        actual = os.path.getsize(file) if os.path.isfile(file) else -1
        if actual < size:
            have = "missing" if actual < 0 else f"{actual} bytes"
            return f"{file!r} is truncated ({have}, its .metadata records {size})"
    return None


def choose_resume_checkpoint(
    resume_mode: str, root: str, resume_from_path: str | None
) -> tuple[str | None, list[str]]:
    """The checkpoint a run starts from and, for ``auto``, the newer damaged ones passed over.

    Returns:
        ``(path, skipped)``: the newest complete, readable checkpoint (``auto``), None (``disable``)
        or the one named (``resume_path``); ``skipped`` holds one sentence per damaged checkpoint
        ``auto`` passed over, newest first.

    Raises:
        ValueError: in one sentence naming the checkpoint, when the one named is incomplete or
            damaged, or when ``auto`` finds complete checkpoints but none is readable.
    """
    if resume_mode not in RESUME_MODES:
        raise ValueError(
            f"trainer.resume_mode={resume_mode!r} is not valid; use one of {list(RESUME_MODES)}."
        )
    if resume_mode == "disable":
        return None, []
    if resume_mode == "resume_path":
        if not resume_from_path or not is_complete(resume_from_path):
            raise ValueError(
                f"trainer.resume_from_path={resume_from_path!r} is not a complete checkpoint "
                f"(a global_step_N folder holding {COMPLETE_MARKER}); pick one under {root!r}."
            )
        damage = checkpoint_damage(resume_from_path)
        if damage:
            raise ValueError(
                f"trainer.resume_from_path={resume_from_path!r} is damaged: {damage}; pick another "
                f"checkpoint under {root!r}."
            )
        return resume_from_path, []
    skipped = []
    for _, path in reversed(complete_checkpoints(root)):
        damage = checkpoint_damage(path)
        if damage is None:
            return path, skipped
        skipped.append(f"checkpoint {path!r} is damaged: {damage}")
    if skipped:
        raise ValueError(
            f"trainer.resume_mode=auto found no readable checkpoint under {root!r}: {'; '.join(skipped)}; "
            "delete the damaged folders or set trainer.resume_mode=disable to start fresh."
        )
    return None, []


def resolve_resume_path(resume_mode: str, root: str, resume_from_path: str | None) -> str | None:
    """The checkpoint a run starts from: newest readable complete one (``auto``), none, or the one named."""
    return choose_resume_checkpoint(resume_mode, root, resume_from_path)[0]


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


def controller_rng_state() -> dict[str, Any]:
    """The controller's Python, NumPy and torch RNG states (user reward functions may draw from them)."""
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def restore_controller_rng(state: dict[str, Any]) -> None:
    """Restore :func:`controller_rng_state`."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def prune_checkpoints(root: str, max_to_keep: int | None) -> list[str]:
    """Delete the oldest complete checkpoints beyond ``max_to_keep`` (None or <= 0 keeps all)."""
    if not max_to_keep or max_to_keep <= 0:
        return []
    found = complete_checkpoints(root)
    removed = [path for _, path in found[:-max_to_keep]]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


# ---- the shards of one or several policies ---------------------------------------------------------
# One policy keeps the part names ``actor/`` and ``critic/`` (``model_merger`` reads them); several
# policies (multi-agent runs) get ``policy_<k>/actor/`` and ``policy_<k>/critic/``.
def policy_part(index: int, count: int, role: str) -> str:
    """The folder of policy ``index``'s ``role`` (actor, critic) in a checkpoint of ``count`` policies."""
    return role if count == 1 else os.path.join(f"policy_{index}", role)


def unique_groups(groups: list[Any]) -> list[Any]:
    """``groups`` without repeats, in first-seen order (agents sharing a policy share its groups)."""
    return list({id(g): g for g in groups}.values())


def save_policies(writer: CheckpointWriter, groups: list[Any]) -> None:
    """Each policy's workers write their actor (and critic) shards into the checkpoint being written."""
    for k, group in enumerate(groups):
        group.actor.save_checkpoint(writer.part(policy_part(k, len(groups), "actor")))
        if group.critic is not None:
            group.critic.save_checkpoint(writer.part(policy_part(k, len(groups), "critic")))


def load_policies(path: str, groups: list[Any]) -> None:
    """Each policy's workers load their shards from checkpoint ``path`` (their rollouts are not synced)."""
    for k, group in enumerate(groups):
        group.actor.load_checkpoint(os.path.join(path, policy_part(k, len(groups), "actor")))
        if group.critic is not None:
            group.critic.load_checkpoint(os.path.join(path, policy_part(k, len(groups), "critic")))
