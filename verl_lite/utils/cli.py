"""The shared shell of every ``python -m verl_lite.main_*`` entry point: exit codes and one-line errors."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Any


def run_cli(cfg: Any, load_config: Callable[[Any], Any], run: Callable[[Any], Any]) -> None:
    """Validate ``cfg`` (exit 2 with the message on a bad config), then run.

    A run that fails exits 3 with its own sentence when verl_lite stopped it on purpose (``RunError``,
    raised in the controller or a worker), 128 + the signal number when a signal stopped it, and 1 with
    the worker's traceback otherwise; the last line names the exception the failure started from.
    """
    from verl_lite.utils.errors import RUN_ERROR_EXIT_CODE, RunError, root_cause

    try:
        config = load_config(cfg)
    except ValueError as err:
        print(f"verl_lite: {err}", file=sys.stderr)
        sys.exit(2)
    try:
        run(config)
    except Exception as err:
        exit_code = getattr(err, "exit_code", None)  # a run stopped by a signal (StoppedBySignal)
        if exit_code is not None:
            print(f"verl_lite: {err}", file=sys.stderr)
            exit_now(exit_code)
        cause = root_cause(err)
        if isinstance(cause, RunError):
            print(f"verl_lite: the run stopped: {cause}", file=sys.stderr)
            sys.exit(RUN_ERROR_EXIT_CODE)
        trace = f"{err}\n" if cause is not err else ""  # Ray's error holds the worker's traceback
        print(f"{trace}verl_lite: training failed: {type(cause).__name__}: {cause}", file=sys.stderr)
        sys.exit(1)


def exit_now(code: int) -> None:
    """Exit with ``code`` once logs and output are flushed, skipping the interpreter's native teardown.

    Ray is shut down by then; the teardown of the native libraries loaded (Ray's core worker, torch) took
    seconds on a busy machine, after a signal asked the run to stop.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
