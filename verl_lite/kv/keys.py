"""Key scheme of the KV store: prompt-group markers, trajectory keys, statuses, and which index holds a key.

A prompt group (one prompt, ``n`` responses) is tracked by a marker key ``{uid}`` tagged with its
``status`` and ``global_steps``; its trajectories are stored under ``{uid}_{session_id}_{index}``.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

# Group statuses, in the order a group moves through them (failure can happen at any point).
PENDING = "pending"
RUNNING = "running"
FINISHED = "finished"
FAILURE = "failure"
GROUP_STATUSES = (PENDING, RUNNING, FINISHED, FAILURE)


def trajectory_key(uid: str, session_id: int, index: int = 0) -> str:
    """Key of trajectory ``index`` of session ``session_id`` (one of the ``n`` samples) of ``uid``."""
    return f"{uid}_{int(session_id)}_{int(index)}"


def parse_trajectory_key(key: str) -> tuple[str, int, int]:
    """Split ``{uid}_{session_id}_{index}`` into its parts (``uid`` may itself contain ``_``)."""
    parts = key.rsplit("_", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        raise ValueError(f"{key!r} is not a trajectory key; expected '{{uid}}_{{session_id}}_{{index}}'.")
    return parts[0], int(parts[1]), int(parts[2])


def group_tag(uid: str, status: str, global_steps: int, **extra: Any) -> dict:
    """Tag of a group marker; ``status`` must be one of :data:`GROUP_STATUSES`."""
    if status not in GROUP_STATUSES:
        raise ValueError(f"group status {status!r} is not one of {GROUP_STATUSES}.")
    return {"uid": str(uid), "status": status, "global_steps": int(global_steps), **extra}


def trajectory_tag(
    uid: str, status: str, prompt_len: int, response_len: int, global_steps: int, **extra: Any
) -> dict:
    """Tag of one trajectory key (lengths in tokens, ``global_steps`` = weight version used)."""
    lengths = {"prompt_len": int(prompt_len), "response_len": int(response_len)}
    return {"uid": str(uid), "status": status, **lengths, "global_steps": int(global_steps), **extra}


def group_of(key: str, tag: dict | None = None) -> str:
    """Group id of ``key``: its tag's ``uid`` if present, else the key's prefix before the first ``_``."""
    if tag and "uid" in tag:
        return str(tag["uid"])
    return key.split("_", 1)[0]


def index_of_keys(keys: Sequence[str], num_indexes: int) -> np.ndarray:
    """Index actor of each key: a CRC32 of the key modulo ``num_indexes`` (stable across processes)."""
    crcs = np.fromiter(map(zlib.crc32, map(str.encode, keys)), dtype=np.int64, count=len(keys))
    return crcs % num_indexes
