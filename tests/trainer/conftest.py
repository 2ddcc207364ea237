"""Fixtures of the trainer tests."""

from types import SimpleNamespace

import pytest
import ray

from tests.conftest import start_local_ray


@pytest.fixture
def cluster():
    """The suite's Ray (tests/conftest.py) as a cluster main_ppo runs join: ``joining(cluster)`` sets
    ``ray_kwargs.ray_init.address`` to its address. Each run's actors and placement groups end with it."""
    start_local_ray()
    return SimpleNamespace(address=ray.get_runtime_context().gcs_address)
