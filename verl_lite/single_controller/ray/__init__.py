"""Ray back end of the single controller: resource pools, worker groups and colocation."""

from verl_lite.single_controller.ray.colocated import ColocatedWorker, create_colocated_worker_cls
from verl_lite.single_controller.ray.resource_pool import (
    RayResourcePool,
    ResourcePoolError,
    ResourcePoolManager,
    Role,
)
from verl_lite.single_controller.ray.worker_group import (
    GroupFuture,
    RayClassWithInitArgs,
    RayWorkerGroup,
    WorkerError,
)

__all__ = [
    "ColocatedWorker",
    "GroupFuture",
    "RayClassWithInitArgs",
    "RayResourcePool",
    "RayWorkerGroup",
    "ResourcePoolError",
    "ResourcePoolManager",
    "Role",
    "WorkerError",
    "create_colocated_worker_cls",
]
