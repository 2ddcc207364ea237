"""A synchronous ``calculator`` tool that never returns, as a tool stuck on a dead connection would."""

from __future__ import annotations

import threading

from verl_lite.workers.tools import tool


@tool(name="calculator")
def hanging_calculator(expression: str) -> str:
    """Evaluate an arithmetic expression (never returns).

    Args:
        expression: e.g. "3 * (4 + 5)".
    """
    threading.Event().wait()  # blocks its thread for good: a timeout cannot interrupt it
    return expression
