"""``RunError``: a run cannot go on for a cause verl_lite names, and the message says all of it."""

from __future__ import annotations

# The exit status of a run stopped by a RunError (1 is left to unexpected failures, 2 to bad input).
RUN_ERROR_EXIT_CODE = 3


class RunError(RuntimeError):
    """Raised on purpose where a run cannot go on (every rollout server gone, the scorer failing for every
    group, DAPO's refill limit, a rollout past its timeout): the message is one sentence naming the cause
    and what to change, so the entry points print it alone, without the traceback Ray wraps around it."""


class RunTimeout(RunError, TimeoutError):
    """A :class:`RunError` for a wait past its configured bound (the message names the key)."""


def root_cause(err: BaseException) -> BaseException:
    """The exception a chain of Ray task errors started from (``err`` itself when it is not one)."""
    import ray.exceptions

    while isinstance(err, ray.exceptions.RayTaskError) and getattr(err, "cause", None) is not None:
        err = err.cause
    return err


__all__ = ["RUN_ERROR_EXIT_CODE", "RunError", "RunTimeout", "root_cause"]
