"""The key -> index actor hash."""

import subprocess
import sys

from verl_lite.kv.client import index_of_keys


def test_index_hash_is_stable_across_processes_and_spreads_keys():
    keys = [f"k{i}" for i in range(1000)]
    here = index_of_keys(keys, 4).tolist()
    code = "from verl_lite.kv.client import index_of_keys; print(index_of_keys([f'k{i}' for i in range(1000)], 4).tolist())"
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert str(here) == there.strip()  # Python's hash() would differ between processes
    assert min(here.count(u) for u in range(4)) > 200
