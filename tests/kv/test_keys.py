"""The key scheme: group markers, trajectory keys, group ids and the key -> index actor hash."""

import subprocess
import sys

import pytest

from verl_lite.kv.keys import (
    group_of,
    group_tag,
    index_of_keys,
    parse_trajectory_key,
    trajectory_key,
    trajectory_tag,
)


def test_trajectory_key_round_trips_even_when_the_uid_has_underscores():
    key = trajectory_key("run_7", session_id=3, index=1)
    assert key == "run_7_3_1"
    assert parse_trajectory_key(key) == ("run_7", 3, 1)
    with pytest.raises(ValueError, match="not a trajectory key"):
        parse_trajectory_key("run_7")


def test_group_of_prefers_the_uid_tag_and_tells_markers_from_trajectories():
    marker, marker_tag = "a_b", group_tag("a_b", "pending", global_steps=3)
    traj, traj_tag = trajectory_key("a_b", 0), trajectory_tag("a_b", "success", 5, 7, global_steps=3)
    assert group_of(traj, traj_tag) == "a_b" and group_of(marker, marker_tag) == marker
    assert group_of("u1_0_0") == "u1"  # no tag: prefix before the first '_'
    assert traj_tag == {
        "uid": "a_b",
        "status": "success",
        "prompt_len": 5,
        "response_len": 7,
        "global_steps": 3,
    }


def test_group_tag_rejects_an_unknown_status():
    with pytest.raises(ValueError, match="'done' is not one of"):
        group_tag("u", "done", 0)


def test_index_hash_is_stable_across_processes_and_spreads_keys():
    keys = [f"k{i}" for i in range(1000)]
    here = index_of_keys(keys, 4).tolist()
    code = "from verl_lite.kv.keys import index_of_keys; print(index_of_keys([f'k{i}' for i in range(1000)], 4).tolist())"
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert str(here) == there.strip()  # Python's hash() would differ between processes
    assert min(here.count(u) for u in range(4)) > 200
