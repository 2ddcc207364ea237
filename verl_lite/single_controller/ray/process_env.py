"""Environment variables every Ray worker process of a verl_lite job starts with (unless the user set them)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

# TOKENIZERS_PARALLELISM: the Rust tokenizer's thread pool would fight the workers' own threads.
# MALLOC_ARENA_MAX: the rollout servers decode and the actors train on threads other than the process's
# main one. glibc gives such threads their own malloc arenas, whose 64 MB heaps are handed back to the
# system as soon as they empty, so the KV cache and activation tensors of every decode step and update
# page-fault in again. One arena reuses the freed memory as the main thread does; the tensors are large
# and few, so the shared arena's lock costs nothing measurable.
WORKER_ENV_DEFAULTS = {"TOKENIZERS_PARALLELISM": "false", "MALLOC_ARENA_MAX": "1"}


def worker_env_vars(**extra: str) -> dict[str, str]:
    """``WORKER_ENV_DEFAULTS`` (each one the user already exported is left to them) plus ``extra``."""
    defaults = {name: value for name, value in WORKER_ENV_DEFAULTS.items() if name not in os.environ}
    return {**defaults, **extra}


# What the run under way in this process sets (run_environment); every worker group it starts gets it.
_RUN_ENV: dict[str, str] = {}


@contextlib.contextmanager
def run_environment(env: dict[str, str]) -> Iterator[None]:
    """Within the block, this process's environment holds ``env`` and every ``RayWorkerGroup`` started
    from it passes ``env`` to its workers (``run_env_vars``); both are restored afterwards.

    A controller that serves several runs in a row (a reused ``TaskRunner``) gives each run's processes
    that run's environment (its extensions, its KV store's name) instead of the one it started with.
    """
    global _RUN_ENV
    saved, saved_run_env = {name: os.environ.get(name) for name in env}, _RUN_ENV
    os.environ.update(env)
    _RUN_ENV = {**saved_run_env, **env}
    try:
        yield
    finally:
        _RUN_ENV = saved_run_env
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_env_vars() -> dict[str, str]:
    """The environment variables of the run under way in this process (``run_environment``), or none."""
    return dict(_RUN_ENV)


__all__ = ["WORKER_ENV_DEFAULTS", "run_env_vars", "run_environment", "worker_env_vars"]
