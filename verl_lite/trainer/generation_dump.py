"""Rollout samples and validation generations as JSONL, one file per step, for reading what the policy wrote.

``trainer.rollout_data_dir`` gets ``<step>.jsonl`` with every training trajectory of the step;
``trainer.validation_data_dir`` gets ``<step>.jsonl`` with every validation generation. One line per
trajectory: step, uid, data source, prompt and response text, ground truth, score, acc, the
extracted answer (pred), lengths and finish reason. The rollout workers decode the token ids (the controller never reads token tensors);
the controller joins the text with the tags and the prompt rows it submitted.
"""

from __future__ import annotations

import json
import os
from typing import Any

# Tag fields copied into each line when present.
TAG_FIELDS = (
    "score",
    "acc",
    "pred",
    "reward_extra",
    "prompt_len",
    "response_len",
    "finish_reason",
    "weight_version",
    "min_weight_version",
)


def generation_rows(
    step: int,
    keys: list[str],
    tags: list[dict],
    texts: dict[str, dict[str, str]],
    groups: dict[str, dict[str, Any]],
) -> list[dict[str, Any]]:
    """One JSON-ready dict per trajectory key, in ``keys`` order.

    Args:
        step: the global step the generations belong to.
        keys, tags: the trajectories (as returned by the rollout).
        texts: ``{key: {"prompt": ..., "response": ...}}`` decoded by the rollout workers.
        groups: ``{uid: {"data_source": ..., "ground_truth": ...}}`` of the submitted prompts.
    """
    rows = []
    for key, tag in zip(keys, tags):
        uid = tag.get("uid", key)
        group = groups.get(uid, {})
        row = {
            "step": step,
            "uid": uid,
            "key": key,
            "data_source": group.get("data_source"),
            **texts.get(key, {}),
            "ground_truth": group.get("ground_truth"),
        }
        row.update({name: tag[name] for name in TAG_FIELDS if name in tag})
        rows.append(row)
    return rows


def write_generations(directory: str, step: int, rows: list[dict[str, Any]]) -> str:
    """Write ``rows`` to ``directory/<step>.jsonl`` (replacing an older file of that step); returns the path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{step}.jsonl")
    with open(path + ".tmp", "w") as f:
        for row in rows:
            f.write(json.dumps(row, default=str) + "\n")
    os.replace(path + ".tmp", path)
    return path
