"""``RayWorkerGroup``: one actor per pool slot, with every ``@register`` method bound as a group method."""

from __future__ import annotations

import functools
import inspect
import re
import sys
import time
from collections.abc import Callable
from typing import Any

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from verl_lite.single_controller.decorator import Execute, MethodSpec, get_method_spec
from verl_lite.single_controller.dispatch import DispatchPlan
from verl_lite.single_controller.ray import parking
from verl_lite.single_controller.ray.process_env import run_env_vars
from verl_lite.single_controller.ray.resource_pool import RayResourcePool
from verl_lite.single_controller.worker import MeshRank
from verl_lite.transport import pack_tree, unpack_tree
from verl_lite.utils.network import node_address_and_free_port

# Arguments shared by several ranks and bigger than this are put in the object store once.
_SHARED_ARG_PUT_BYTES = 100 * 1024


class WorkerError(RuntimeError):
    """A worker method raised; the message names the method, the rank and the worker's traceback."""


class RayClassWithInitArgs:
    """A worker class (plain or ``ray.remote``-wrapped) with the arguments to construct it."""

    def __init__(self, cls: type, *args: Any, **kwargs: Any):
        self.cls = cls
        self.args = args
        self.kwargs = kwargs

    @property
    def user_class(self) -> type:
        """The undecorated worker class (unwraps ``ray.remote``)."""
        return getattr(self.cls, "__ray_actor_class__", self.cls)


class GroupFuture:
    """The pending result of a non-blocking group method; ``get()`` waits and collects."""

    def __init__(self, collect: Callable[[list], Any], refs: list, describe: Callable[[int], str]):
        self._collect = collect
        self._refs = refs
        self._describe = describe

    def get(self, timeout: float | None = None) -> Any:
        """Wait for every rank and return the collected result (raises ``WorkerError`` on failure)."""
        return self._collect(gather(self._refs, self._describe, timeout))


def gather(refs: list, describe: Callable[[int], str], timeout: float | None = None) -> list:
    """``ray.get`` the per-rank results; a failure is re-raised naming the rank that failed first."""
    try:
        outputs = ray.get(refs, timeout=timeout)
    except (ray.exceptions.RayTaskError, ray.exceptions.RayActorError):
        for i, ref in enumerate(refs):
            try:
                ray.get(ref)
            except (ray.exceptions.RayTaskError, ray.exceptions.RayActorError) as err:
                raise WorkerError(_failure_message(describe(i), err)) from None
        raise
    return [unpack_tree(out) for out in outputs]


def _failure_message(where: str, err: Exception) -> str:
    cause = getattr(err, "cause", None)
    headline = f"{type(cause).__name__}: {cause}" if cause is not None else type(err).__name__
    trace = re.sub(r"\x1b\[[0-9;]*m", "", getattr(err, "traceback_str", None) or str(err))
    return f"{where} failed with {headline}\nworker traceback:\n{trace}"


def _rendezvous_address(pg, bundle: int) -> tuple[str, int]:
    """Rank 0's node address and a port free there, for ``MASTER_ADDR`` / ``MASTER_PORT``: looked up in
    this process when the slot is on its node, else by a task placed in the slot (a process to start)."""
    node = ray.util.placement_group_table(pg)["bundles_to_node_id"].get(bundle)
    if node == ray.get_runtime_context().get_node_id():
        return node_address_and_free_port()
    probe = ray.remote(num_cpus=0)(node_address_and_free_port).options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=bundle)
    )
    return ray.get(probe.remote())


class RayWorkerGroup:
    """Creates one worker actor per slot of ``resource_pool`` and binds its ``@register`` methods.

    A bound method ``wg.m(*args)`` asks the method's dispatch mode to split the arguments per
    rank, calls ``m`` on each worker (tensor payloads travel as numpy buffers), and collects.

    With ``max_restarts`` Ray builds a worker whose process died again, in its slot and with its
    constructor arguments (calls in flight fail, none is retried); see :meth:`execute_on_live`.
    """

    def __init__(
        self,
        resource_pool: RayResourcePool,
        ray_cls_with_init: RayClassWithInitArgs,
        name_prefix: str | None = None,
        env_vars: dict[str, str] | None = None,
        max_restarts: int = 0,
    ):
        self.resource_pool = resource_pool
        self.ray_cls_with_init = ray_cls_with_init
        self.name_prefix = name_prefix or resource_pool.name_prefix
        self.max_restarts = max_restarts
        self.keep_key: tuple | None = None  # set where the group's processes may serve a later run
        self._workers = self._create_workers(env_vars or {})
        self._method_prefix = ""
        self._mesh_cache: dict[str, list[MeshRank]] = {}
        self._bind_methods(ray_cls_with_init.user_class)

    # ---- creation -----------------------------------------------------------------------------
    def _create_workers(self, env_vars: dict[str, str]) -> list:
        slots = self.resource_pool.slots()
        master_addr, master_port = _rendezvous_address(slots[0][0], slots[0][1])
        base_env = {**run_env_vars(), **env_vars}
        envs = [
            {
                **base_env,
                "RANK": str(rank),
                "WORLD_SIZE": str(len(slots)),
                "LOCAL_RANK": str(local_rank),
                "LOCAL_WORLD_SIZE": str(local_world_size),
                "MASTER_ADDR": master_addr,
                "MASTER_PORT": str(master_port),
            }
            for rank, (_, _, local_rank, local_world_size) in enumerate(slots)
        ]
        # roles built in place (colocated classes) can be built again in a kept process (see parking)
        role_classes = getattr(self.ray_cls_with_init.user_class, "role_classes", None)
        if role_classes is not None and self.max_restarts == 0 and not self.resource_pool.use_gpu:
            roles = tuple(
                (r, c.user_class.__module__, c.user_class.__qualname__) for r, c in role_classes.items()
            )
            env = tuple(sorted(base_env.items()))
            self.keep_key = (roles, env)
            kept = parking.take_workers(self.resource_pool, roles, env)
            if kept is not None:
                self.keep_key, workers = kept  # the processes' class: the roles they can host
                kwargs = {"role_classes": role_classes}
                ray.get([w._vl_rebuild.remote(env, kwargs) for w, env in zip(workers, envs)])
                return workers
        parking.end_unused(self.resource_pool)  # kept processes that do not fit hold the pool's slots
        remote_cls = self.ray_cls_with_init.cls
        if not hasattr(remote_cls, "remote"):
            remote_cls = ray.remote(remote_cls)
        share = 1.0 / self.resource_pool.max_colocate_count
        workers = []
        for (pg, bundle, _, _), env in zip(slots, envs):
            options = {
                "num_cpus": share,
                "scheduling_strategy": PlacementGroupSchedulingStrategy(
                    pg, placement_group_bundle_index=bundle
                ),
                "runtime_env": {"env_vars": env},
                # the caller decides what to resend: a call may have run halfway on the dead process
                "max_restarts": self.max_restarts,
                "max_task_retries": 0,
            }
            if self.resource_pool.use_gpu:
                options["num_gpus"] = share
            workers.append(
                remote_cls.options(**options).remote(
                    *self.ray_cls_with_init.args, **self.ray_cls_with_init.kwargs
                )
            )
        return workers

    def _bind_methods(self, user_class: type, prefix: str = "") -> None:
        for name, member in inspect.getmembers(user_class):
            spec = get_method_spec(member)
            if spec is None or not name.startswith(prefix):
                continue
            public = name[len(prefix) :]
            setattr(self, public, self._make_group_method(name, spec))

    def _make_group_method(self, method_name: str, spec: MethodSpec) -> Callable:
        def group_method(*args: Any, **kwargs: Any) -> Any:
            return self.execute(method_name, spec, *args, **kwargs)

        group_method.__name__ = method_name
        return group_method

    # ---- execution ----------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        """Number of workers in the group."""
        return len(self._workers)

    @property
    def workers(self) -> list:
        """The worker actor handles, in rank order."""
        return list(self._workers)

    def mesh_ranks(self, mesh_name: str) -> list[MeshRank]:
        """Every rank's place in ``mesh_name`` (asked once from the workers, then cached)."""
        if mesh_name not in self._mesh_cache:
            ranks = ray.get([w._vl_mesh_rank.remote(mesh_name) for w in self._workers])
            missing = [i for i, r in enumerate(ranks) if r is None]
            if missing:
                raise RuntimeError(
                    f"mesh {mesh_name!r} is not registered on ranks {missing}; call "
                    f"self.register_mesh({mesh_name!r}, dp_rank, is_collect) in every worker first."
                )
            self._mesh_cache[mesh_name] = ranks
        return self._mesh_cache[mesh_name]

    def execute(self, method_name: str, spec: MethodSpec, *args: Any, **kwargs: Any) -> Any:
        """Dispatch, run and collect ``method_name`` according to ``spec``."""
        mode = spec.dispatch_mode
        plan = mode.dispatch(self, args, kwargs)
        if isinstance(plan, tuple):
            plan = DispatchPlan(*plan)
        if len(plan.args) != self.world_size:
            raise ValueError(
                f"dispatch mode {mode.name!r} produced {len(plan.args)} calls for a group of {self.world_size}."
            )
        rank_zero = spec.execute_mode is Execute.RANK_ZERO
        ranks = [0] if rank_zero else list(range(self.world_size))
        refs = self._submit(method_name, ranks, plan)
        collect = (
            (lambda outs: outs[0])
            if rank_zero
            else functools.partial(mode.collect, self, context=plan.context)
        )
        future = GroupFuture(collect, refs, lambda i: self._describe(method_name, ranks[i]))
        return future if not spec.blocking else future.get()

    def _submit(self, method_name: str, ranks: list[int], plan: DispatchPlan) -> list:
        packed: dict[int, Any] = {}
        counts: dict[int, int] = {}
        for rank in ranks:
            for value in (*plan.args[rank], *plan.kwargs[rank].values()):
                counts[id(value)] = counts.get(id(value), 0) + 1

        def prepare(value: Any) -> Any:
            key = id(value)
            if key not in packed:
                wire = pack_tree(value)
                if counts.get(key, 0) > 1 and _nbytes(wire) > _SHARED_ARG_PUT_BYTES:
                    wire = ray.put(wire)
                packed[key] = wire
            return packed[key]

        refs = []
        for rank in ranks:
            args = tuple(prepare(a) for a in plan.args[rank])
            kwargs = {k: prepare(v) for k, v in plan.kwargs[rank].items()}
            refs.append(self._workers[rank]._vl_execute.remote(method_name, args, kwargs))
        return refs

    def _describe(self, method_name: str, rank: int) -> str:
        cls = self.ray_cls_with_init.user_class.__name__
        return f"{cls}.{method_name} on rank {rank} of {self.world_size} (group {self.name_prefix!r})"

    def execute_on_live(self, method_name: str, *args: Any, poll_s: float = 0.5, **kwargs: Any) -> dict:
        """Call a worker method on every rank still alive, with the same arguments; ``{rank: result}``.

        For groups built with ``max_restarts``, and methods that may run twice: a rank Ray is restarting
        gets the call again once it is up (printing what it waits for), a rank gone for good (restarts used
        up) is left out. A method that raises fails the call, naming the rank.
        """
        wire = pack_tree(args), pack_tree(kwargs)
        pending = {r: self._workers[r]._vl_execute.remote(method_name, *wire) for r in range(self.world_size)}
        results: dict[int, Any] = {}
        waited: set[int] = set()
        while pending:
            rank, ref = next(iter(pending.items()))
            try:
                results[rank] = unpack_tree(ray.get(ref))
                del pending[rank]
            except ray.exceptions.ActorDiedError:
                del pending[rank]
            except ray.exceptions.ActorUnavailableError:
                if rank not in waited:
                    waited.add(rank)
                    print(
                        f"verl_lite: {self._describe(method_name, rank)} waits for Ray to restart the worker.",
                        file=sys.stderr,
                        flush=True,
                    )
                time.sleep(poll_s)
                pending[rank] = self._workers[rank]._vl_execute.remote(method_name, *wire)
            except ray.exceptions.RayTaskError as err:
                raise WorkerError(_failure_message(self._describe(method_name, rank), err)) from None
        return results

    # ---- colocation ---------------------------------------------------------------------------
    def spawn(self, prefix_set: set[str] | list[str]) -> dict[str, RayWorkerGroup]:
        """Split a colocated group into one group per role prefix, sharing the same actors.

        The group ``spawn(["actor"])["actor"]`` exposes ``actor_<m>`` of the colocated class as ``<m>``.
        """
        groups = {}
        for prefix in prefix_set:
            view = object.__new__(RayWorkerGroup)
            view.resource_pool = self.resource_pool
            view.ray_cls_with_init = self.ray_cls_with_init
            view.name_prefix = f"{self.name_prefix}/{prefix}"
            view.max_restarts, view.keep_key = self.max_restarts, self.keep_key
            view._workers = self._workers
            view._method_prefix = f"{prefix}_"
            view._mesh_cache = {}
            view._bind_methods(self.ray_cls_with_init.user_class, prefix=f"{prefix}_")
            groups[prefix] = view
        return groups

    def endpoints(self, name: str) -> list:
        """The remote method ``name`` (an ``@endpoint``) of every worker, in rank order, to call one by one."""
        return [getattr(worker, self._method_prefix + name) for worker in self._workers]

    def keep_or_kill(self) -> bool:
        """Leave the worker processes ready for a later run's group (``keep_key``; see parking), or end
        them where they cannot host another worker; whether they were kept (the caller keeps the pool)."""
        if self.keep_key is not None:
            try:
                if all(ray.get([worker._vl_close.remote() for worker in self._workers])):
                    return True
            except ray.exceptions.RayError:
                pass  # a worker that died or failed to close: its group ends
        self.kill()
        return False

    def kill(self) -> None:
        """End every worker actor of the group."""
        for worker in self._workers:
            ray.kill(worker)
        self._workers = []


def _nbytes(obj: Any) -> int:
    if hasattr(obj, "nbytes") and callable(obj.nbytes):
        return obj.nbytes()
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(o) for o in obj)
    if isinstance(obj, dict):
        return sum(_nbytes(o) for o in obj.values())
    return 0
