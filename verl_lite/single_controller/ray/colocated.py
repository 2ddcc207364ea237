"""Colocation: several roles' workers living in one process per bundle, exposed as prefixed methods."""

from __future__ import annotations

import inspect

import ray

from verl_lite.single_controller.decorator import METHOD_SPEC_ATTR, endpoint, get_method_spec, is_endpoint
from verl_lite.single_controller.ray.worker_group import RayClassWithInitArgs
from verl_lite.single_controller.worker import MeshRank, Worker


class ColocatedWorker(Worker):
    """Holds one worker per role in the same process; ``<role>_<method>`` forwards to that role."""

    role_classes: dict[str, RayClassWithInitArgs] = {}

    def __init__(self, role_classes: dict[str, RayClassWithInitArgs] | None = None) -> None:
        super().__init__()
        specs = self.role_classes if role_classes is None else role_classes
        self.roles: dict[str, Worker] = {
            role: spec.user_class(*spec.args, **spec.kwargs) for role, spec in specs.items()
        }

    def _vl_close(self) -> bool:
        reusable = True
        for worker in self.roles.values():
            close = getattr(worker, "close", None)
            if callable(close) and close() is False:
                reusable = False
        self.roles = {}
        return super()._vl_close() and reusable

    def _vl_mesh_rank(self, mesh_name: str) -> MeshRank | None:
        for worker in self.roles.values():
            found = worker._vl_mesh_rank(mesh_name)
            if found is not None:
                return found
        return super()._vl_mesh_rank(mesh_name)


def _forwarder(role: str, name: str, spec):
    def method(self, *args, **kwargs):
        return getattr(self.roles[role], name)(*args, **kwargs)

    method.__name__ = f"{role}_{name}"
    setattr(method, METHOD_SPEC_ATTR, spec)
    return method


def _endpoint_forwarder(role: str, name: str, member):
    # An async endpoint stays async, so Ray runs many of its calls at once on the actor's event loop;
    # an async generator stays one, so its items still stream to the caller.
    if inspect.isasyncgenfunction(member):

        async def method(self, *args, **kwargs):
            async for item in getattr(self.roles[role], name)(*args, **kwargs):
                yield item

    elif inspect.iscoroutinefunction(member):

        async def method(self, *args, **kwargs):
            return await getattr(self.roles[role], name)(*args, **kwargs)

    else:

        def method(self, *args, **kwargs):
            return getattr(self.roles[role], name)(*args, **kwargs)

    method.__name__ = f"{role}_{name}"
    return endpoint(method)


def create_colocated_worker_cls(class_dict: dict[str, RayClassWithInitArgs]) -> RayClassWithInitArgs:
    """Build a worker class that runs every role of ``class_dict`` in one process.

    Each role's ``@register`` methods appear as ``<role>_<method>``; ``RayWorkerGroup.spawn`` turns
    the resulting group back into one group per role.
    """
    attrs: dict = {"role_classes": dict(class_dict), "__module__": __name__}
    for role, spec in class_dict.items():
        if "_" in role:
            raise ValueError(
                f"colocated role name {role!r} must not contain '_' (it separates role and method)."
            )
        for name, member in inspect.getmembers(spec.user_class):
            method_spec = get_method_spec(member)
            if method_spec is not None:
                attrs[f"{role}_{name}"] = _forwarder(role, name, method_spec)
            elif is_endpoint(member):
                attrs[f"{role}_{name}"] = _endpoint_forwarder(role, name, member)
    roles = "_".join(class_dict)
    cls = type(f"Colocated_{roles}", (ColocatedWorker,), attrs)
    return RayClassWithInitArgs(ray.remote(cls))
