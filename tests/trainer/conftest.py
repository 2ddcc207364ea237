"""Fixtures of the trainer tests."""

from types import SimpleNamespace

import pytest
import ray

from tests.conftest import start_local_ray


def suite_cluster() -> SimpleNamespace:
    """The suite's Ray (tests/conftest.py) as a cluster main_ppo runs join: ``joining(cluster)`` sets
    ``ray_kwargs.ray_init.address`` to its address. Each run's actors and placement groups end with it."""
    start_local_ray()
    return SimpleNamespace(address=ray.get_runtime_context().gcs_address)


@pytest.fixture
def cluster():
    """``suite_cluster()`` for one test (a test that started a Ray of its own ended the previous one)."""
    return suite_cluster()
