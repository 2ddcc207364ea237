"""Multi-agent checkpoints in verl_lite's one checkpoint layout (``trainer/checkpoint.py``): every policy's
actor and critic shards, and the controller's progress in ``trainer_state.pt``.

One policy (a shared one, or the Hydra mode's) keeps PPO's part names (``actor/``, ``critic/``), so
``model_merger`` reads it as it reads a PPO checkpoint; several policies get ``policy_<k>/actor/`` and
``policy_<k>/critic/``.
"""

from __future__ import annotations

import numbers
import os
from typing import Any

from verl_lite.trainer.checkpoint import (
    CheckpointWriter,
    checkpoint_damage,
    find_latest_checkpoint,
    is_complete,
)


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


def load_policies(path: str, groups: list[Any], version: int) -> None:
    """Each policy's workers load their shards from checkpoint ``path``; its rollout then serves those
    weights as weight ``version``, exactly as after the update that was saved."""
    for k, group in enumerate(groups):
        group.actor.load_checkpoint(os.path.join(path, policy_part(k, len(groups), "actor")))
        if group.critic is not None:
            group.critic.load_checkpoint(os.path.join(path, policy_part(k, len(groups), "critic")))
        group.sync_weights(version)


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
