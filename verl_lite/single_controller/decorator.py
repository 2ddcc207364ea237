"""``@register``: declare how a worker method is dispatched, executed and collected by its group."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from verl_lite.single_controller.dispatch import DispatchMode, get_dispatch_mode

F = TypeVar("F", bound=Callable)

# The one attribute a decorated method carries; worker groups bind methods by it and nothing else.
METHOD_SPEC_ATTR = "__verl_lite_method_spec__"
# Marks a per-replica method that other actors call directly (see ``endpoint``).
ENDPOINT_ATTR = "__verl_lite_endpoint__"


class Execute(enum.Enum):
    """Which ranks run a group method: all of them, or rank 0 alone (its result is returned as is)."""

    ALL = "all"
    RANK_ZERO = "rank_zero"


@dataclass(frozen=True)
class MethodSpec:
    """How a worker method runs as a group method."""

    dispatch_mode: DispatchMode
    execute_mode: Execute = Execute.ALL
    blocking: bool = True


def register(
    dispatch_mode: DispatchMode | str = "all_to_all",
    execute_mode: Execute = Execute.ALL,
    blocking: bool = True,
) -> Callable[[F], F]:
    """Mark a ``Worker`` method so ``RayWorkerGroup`` binds a same-named group method.

    Args:
        dispatch_mode: a ``Dispatch.X`` mode, a mode from ``make_nd_dispatch`` or
            ``register_dispatch_mode``, or the registered name of one.
        execute_mode: ``Execute.ALL`` (every rank runs) or ``Execute.RANK_ZERO``.
        blocking: when False the group method returns a future whose ``.get()`` collects.
    """
    spec = MethodSpec(get_dispatch_mode(dispatch_mode), Execute(execute_mode), bool(blocking))

    def decorator(method: F) -> F:
        setattr(method, METHOD_SPEC_ATTR, spec)
        return method

    return decorator


def get_method_spec(obj: object) -> MethodSpec | None:
    """The ``MethodSpec`` attached by ``@register``, or None for undecorated attributes."""
    return getattr(obj, METHOD_SPEC_ATTR, None)


def endpoint(method: F) -> F:
    """Mark a ``Worker`` method that other actors call on one replica directly, not through its group.

    A rollout server's ``generate`` is one: agent loops on other processes send it one request at a
    time. Colocated workers expose endpoints as ``<role>_<method>`` like group methods, and
    ``RayWorkerGroup.endpoints(name)`` returns the bound remote methods in rank order.
    """
    setattr(method, ENDPOINT_ATTR, True)
    return method


def is_endpoint(obj: object) -> bool:
    """Whether ``obj`` was marked with :func:`endpoint`."""
    return bool(getattr(obj, ENDPOINT_ATTR, False))
