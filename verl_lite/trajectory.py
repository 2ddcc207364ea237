"""One trajectory, declared once: its key, its tag, the columns stored under it and its group's status.

A prompt group is one prompt and its ``n`` sampled responses, named by a ``uid``; the controller's
replay buffer registers it with a :func:`group_tag`. The rollout stores each response as the trajectory
``{uid}_{session}_{index}`` with the columns of :data:`COLUMNS` and a :func:`trajectory_tag` that
also says how many samples its group has. A group's status is read from those tags
(:func:`group_status`): nothing else writes it. Workers read and write trajectory columns only
through :func:`read_columns` and :func:`write_columns`, which refuse a name :data:`COLUMNS` lacks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# A group's status, in the order a group moves through them (failure: some sample failed to score).
PENDING = "pending"
RUNNING = "running"
FINISHED = "finished"
FAILURE = "failure"
GROUP_STATUSES = (PENDING, RUNNING, FINISHED, FAILURE)
# A trajectory's own status: scored (or no scorer), or its scorer raised (tag ``error``).
SUCCESS = "success"

COLUMNS: dict[str, str] = {
    # written by the agent loop as a trajectory finishes
    "prompts": "int64 (prompt_len,): the prompt's token ids",
    "responses": "int64 (response_len,): every token after the prompt, sampled or not",
    "response_mask": "int64 (response_len,): 1 on tokens the model sampled, 0 on tool/observation tokens",
    "rollout_log_probs": "float32 (response_len,): the rollout's log-probs of the response tokens",
    "token_level_scores": "float32 (response_len,): the score on the last sampled token, 0 elsewhere",
    "reward_baselines": "float32 (): the greedy response's score (estimators with a greedy baseline)",
    # written by the step's workers
    "rm_scores": "float32 (response_len,): the reward model's score on the last sampled token",
    "old_log_probs": "float32 (response_len,): log-probs under the actor before the update",
    "entropy": "float32 (response_len,): the actor's entropy at each response token",
    "rollout_is_weights": "float32 (response_len,): off-policy importance weights",
    "rollout_rs_mask": "float32 (response_len,): 0 on tokens the off-policy rejection sampling dropped",
    "ref_log_prob": "float32 (response_len,): log-probs under the reference policy",
    "values": "float32 (response_len,): the critic's value of the state before each token",
    "token_level_rewards": "float32 (response_len,): scores minus the in-reward KL penalty",
    "advantages": "float32 (response_len,): the estimator's advantages",
    "returns": "float32 (response_len,): the critic's targets",
}
# What the rollout stores for every trajectory of a PPO step (the columns a sampled batch holds).
ROLLOUT_COLUMNS = ("prompts", "responses", "response_mask", "rollout_log_probs", "token_level_scores")
# Per-prompt entries of a dataset row that travel with a launch to the agent loops (``prompt_ids``
# always; the others when the dataset has them).
PROMPT_FIELDS = ("raw_prompt", "data_source", "ground_truth", "extra_info", "messages", "agent_name")


def checked_columns(names: Iterable[str], where: str) -> list[str]:
    """``names`` as a list, after checking each is a declared trajectory column."""
    names = list(names)
    unknown = [name for name in names if name not in COLUMNS]
    if unknown:
        raise KeyError(
            f"{where}: {unknown} are not trajectory columns; the declared ones (verl_lite/trajectory.py) "
            f"are {sorted(COLUMNS)}."
        )
    return names


def read_columns(kv: Any, meta: Any, names: Iterable[str]):
    """The TensorDict of columns ``names`` of ``meta``'s trajectories, read from the KV store ``kv``."""
    return kv.kv_batch_get(meta.keys, meta.partition_id, select_fields=checked_columns(names, "read"))


def write_columns(
    kv: Any, keys: Sequence[str], partition_id: str, columns: Mapping[str, Any], tags: list | None = None
):
    """Write ``columns`` (rows aligned with ``keys``) and ``tags`` to the KV store ``kv``; its meta."""
    from tensordict import TensorDict

    checked_columns(columns, "write")
    return kv.kv_batch_put(
        list(keys), partition_id, fields=TensorDict(dict(columns), batch_size=[len(keys)]), tags=tags
    )


def trajectory_key(uid: str, session_id: int, index: int = 0) -> str:
    """Key of trajectory ``index`` of session ``session_id`` (one of the ``n`` samples) of ``uid``."""
    return f"{uid}_{int(session_id)}_{int(index)}"


def parse_trajectory_key(key: str) -> tuple[str, int, int]:
    """Split ``{uid}_{session_id}_{index}`` into its parts (``uid`` may itself contain ``_``)."""
    parts = key.rsplit("_", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        raise ValueError(f"{key!r} is not a trajectory key; expected '{{uid}}_{{session_id}}_{{index}}'.")
    return parts[0], int(parts[1]), int(parts[2])


def group_tag(uid: str, global_steps: int, **extra: Any) -> dict:
    """Tag of a prompt group: ``global_steps`` = the weight version its rollout is submitted for."""
    return {"uid": str(uid), "global_steps": int(global_steps), **extra}


def trajectory_tag(
    uid: str,
    status: str,
    prompt_len: int,
    response_len: int,
    global_steps: int,
    samples: int = 1,
    **extra: Any,
) -> dict:
    """Tag of one trajectory: ``status`` (:data:`SUCCESS` or :data:`FAILURE`, then ``error`` says why),
    lengths in tokens, the weight version ``global_steps``, its group's ``samples`` (``n``) and the
    rollout's entries (``score``, ``acc``, ``pred``, ``num_turns``, ``finish_reason``, weight versions,
    the agent's counters)."""
    if status not in (SUCCESS, FAILURE):
        raise ValueError(f"trajectory status {status!r} is neither {SUCCESS!r} nor {FAILURE!r}.")
    lengths = {"prompt_len": int(prompt_len), "response_len": int(response_len)}
    return {
        "uid": str(uid),
        "status": status,
        **lengths,
        "global_steps": int(global_steps),
        "samples": int(samples),
        **extra,
    }


def group_status(trajectory_tags: Sequence[Mapping]) -> tuple[str, str | None]:
    """``(status, error)`` of a group from the tags of its stored trajectories: pending with none,
    running until all ``samples`` are in, then failure (with the first error) or finished."""
    if not trajectory_tags:
        return PENDING, None
    if len(trajectory_tags) < int(trajectory_tags[0].get("samples", 1)):
        return RUNNING, None
    errors = [tag.get("error", "unknown error") for tag in trajectory_tags if tag.get("status") == FAILURE]
    return (FAILURE, errors[0]) if errors else (FINISHED, None)


def group_of(key: str, tag: Mapping | None = None) -> str:
    """Group id of ``key``: its tag's ``uid`` if present, else the key's prefix before the first ``_``."""
    if tag and "uid" in tag:
        return str(tag["uid"])
    return key.split("_", 1)[0]
