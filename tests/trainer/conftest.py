"""Fixtures of the trainer tests."""

import pytest
import ray


@pytest.fixture(scope="module")
def ray_8cpu():
    """A fresh local Ray with 8 logical CPUs for a module's SFT / RM runs (shut down afterwards)."""
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=8, object_store_memory=300 * 1024**2, include_dashboard=False)
    yield
    ray.shutdown()
