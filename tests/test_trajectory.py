"""The trajectory declaration: keys, tags, group status, and columns no worker may use undeclared."""

import ast
from pathlib import Path

import pytest

from verl_lite.trajectory import (
    COLUMNS,
    FAILURE,
    FINISHED,
    PENDING,
    RUNNING,
    checked_columns,
    group_of,
    group_status,
    group_tag,
    parse_trajectory_key,
    trajectory_key,
    trajectory_tag,
)

PACKAGE = Path(__file__).resolve().parents[1] / "verl_lite"


def test_trajectory_key_round_trips_even_when_the_uid_has_underscores():
    key = trajectory_key("run_7", session_id=3, index=1)
    assert key == "run_7_3_1"
    assert parse_trajectory_key(key) == ("run_7", 3, 1)
    with pytest.raises(ValueError, match="not a trajectory key"):
        parse_trajectory_key("run_7")


def test_group_of_prefers_the_uid_tag_and_tells_markers_from_trajectories():
    marker, marker_tag = "a_b", group_tag("a_b", global_steps=3)
    traj, traj_tag = trajectory_key("a_b", 0), trajectory_tag("a_b", "success", 5, 7, 3, samples=4)
    assert group_of(traj, traj_tag) == "a_b" and group_of(marker, marker_tag) == marker
    assert group_of("u1_0_0") == "u1"  # no tag: prefix before the first '_'
    assert traj_tag == {
        "uid": "a_b",
        "status": "success",
        "prompt_len": 5,
        "response_len": 7,
        "global_steps": 3,
        "samples": 4,
    }
    with pytest.raises(ValueError, match="'done' is neither 'success' nor 'failure'"):
        trajectory_tag("u", "done", 1, 1, 0)


def test_a_groups_status_follows_from_its_trajectory_tags():
    ok = trajectory_tag("u", "success", 1, 1, 0, samples=3)
    bad = trajectory_tag("u", "failure", 1, 1, 0, samples=3, error="KeyError: 'answer'")
    assert group_status([]) == (PENDING, None)
    assert group_status([ok, bad]) == (RUNNING, None)  # a failed sample waits for the rest of its group
    assert group_status([ok, ok, ok]) == (FINISHED, None)
    assert group_status([ok, bad, ok]) == (FAILURE, "KeyError: 'answer'")


def test_an_undeclared_column_is_refused_with_the_declared_names():
    assert checked_columns(["prompts", "advantages"], "read") == ["prompts", "advantages"]
    with pytest.raises(KeyError, match=r"read: \['advantage'\] are not trajectory columns; the declared"):
        checked_columns(["prompts", "advantage"], "read")


def _column_names(node: ast.AST) -> list[str]:
    """String constants of a column list or dict literal (names built at run time are checked at run time)."""
    if isinstance(node, ast.Dict):
        return [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    if isinstance(node, ast.List | ast.Tuple):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def test_workers_and_trainers_move_trajectory_columns_only_through_the_declaration():
    """No module but the store and the declaration passes fields to the KV client; every column name
    written literally at a read_columns / write_columns call is declared."""
    outside, undeclared = [], []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("kv/") or relative == "trajectory.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name in ("kv_batch_get", "kv_batch_put") and (
                any(k.arg in ("fields", "select_fields") for k in node.keywords) or len(node.args) > 2
            ):
                outside.append(f"{relative}:{node.lineno}")
            if name in ("read_columns", "write_columns", "checked_columns"):
                for arg in node.args:
                    undeclared += [
                        f"{relative}:{node.lineno} {c}" for c in _column_names(arg) if c not in COLUMNS
                    ]
    assert not outside, f"KV field access outside verl_lite/trajectory.py: {outside}"
    assert not undeclared, f"undeclared trajectory columns: {undeclared}"
