"""The shared shell of every ``python -m verl_lite.main_*`` entry point: exit codes and one-line errors."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def run_cli(cfg: Any, load_config: Callable[[Any], Any], run: Callable[[Any], Any]) -> None:
    """Validate ``cfg`` (exit 2 with the message on a bad config), then run (exit 1 on failure)."""
    try:
        config = load_config(cfg)
    except ValueError as err:
        print(f"verl_lite: {err}", file=sys.stderr)
        sys.exit(2)
    try:
        run(config)
    except Exception as err:  # surface the worker's message, not a Ray wrapper
        print(f"verl_lite: training failed: {err}", file=sys.stderr)
        sys.exit(1)
