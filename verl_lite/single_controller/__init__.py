"""Floor 2: one controller drives groups of Ray worker actors through ``@register``-ed methods."""

from verl_lite.single_controller.decorator import Execute, MethodSpec, endpoint, register
from verl_lite.single_controller.dispatch import (
    DISPATCH_MODES,
    Dispatch,
    DispatchMode,
    DispatchPlan,
    make_nd_dispatch,
    register_dispatch_mode,
)
from verl_lite.single_controller.worker import MeshRank, Worker

__all__ = [
    "DISPATCH_MODES",
    "Dispatch",
    "DispatchMode",
    "DispatchPlan",
    "Execute",
    "MeshRank",
    "MethodSpec",
    "Worker",
    "endpoint",
    "make_nd_dispatch",
    "register",
    "register_dispatch_mode",
]
