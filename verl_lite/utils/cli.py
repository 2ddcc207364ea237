"""The shared shell of every ``python -m verl_lite.main_*`` entry point: exit codes and one-line errors."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Any


def run_cli(cfg: Any, load_config: Callable[[Any], Any], run: Callable[[Any], Any]) -> None:
    """Validate ``cfg`` (exit 2 with the message on a bad config), then run (exit 1 on failure, 128 + the
    signal number when a signal stopped the run)."""
    try:
        config = load_config(cfg)
    except ValueError as err:
        print(f"verl_lite: {err}", file=sys.stderr)
        sys.exit(2)
    try:
        run(config)
    except Exception as err:  # surface the worker's message, not a Ray wrapper
        exit_code = getattr(err, "exit_code", None)  # a run stopped by a signal (StoppedBySignal)
        if exit_code is not None:
            print(f"verl_lite: {err}", file=sys.stderr)
            exit_now(exit_code)
        print(f"verl_lite: training failed: {err}", file=sys.stderr)
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
