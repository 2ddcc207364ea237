"""Shared test fixtures: a real local Ray instance, started once and reused across test modules."""

from __future__ import annotations

import os

# Tests start throwaway local clusters; token authentication is for real multi-user clusters.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest

# Logical CPUs are declared generously: placement groups of {CPU: 1} bundles must fit beside
# light actors on a 2-core machine.
RAY_TEST_CPUS = 16
RAY_TEST_OBJECT_STORE_BYTES = 512 * 1024**2


def start_local_ray(num_cpus: int = RAY_TEST_CPUS) -> None:
    """Start a local Ray instance for tests unless one is already running in this process."""
    import ray

    if not ray.is_initialized():
        # "local" always starts a fresh instance, even when another run's Ray is up on this machine.
        ray.init(
            address="local",
            num_cpus=num_cpus,
            object_store_memory=RAY_TEST_OBJECT_STORE_BYTES,
            include_dashboard=False,
            log_to_driver=True,
            configure_logging=False,
        )


@pytest.fixture
def ray_local():
    """A running local Ray (shared by tests; restarted if a test shut it down)."""
    import ray

    start_local_ray()
    yield ray


@pytest.fixture(scope="session", autouse=True)
def _shutdown_ray_at_end():
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()
