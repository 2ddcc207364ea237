"""Environment variables every Ray worker process of a verl_lite job starts with (unless the user set them)."""

from __future__ import annotations

import os

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


__all__ = ["WORKER_ENV_DEFAULTS", "worker_env_vars"]
