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


@pytest.fixture
def ray_must_not_start(monkeypatch):
    """Fails the test if anything starts Ray or a run goes on to use a running one: for the checks that must
    fire before Ray. The suite's Ray, when up, stays up for the tests after (restarting it costs seconds)."""
    from verl_lite.trainer.runtime import Runtime

    def reached(*args, **kwargs):
        raise AssertionError("Ray was reached: a check that belongs before Ray let this input through")

    monkeypatch.setattr(ray, "init", reached)
    monkeypatch.setattr(Runtime, "start_ray", reached)
