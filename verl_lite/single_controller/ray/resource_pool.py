"""Resource pools: placement groups that reserve one bundle per worker process, node by node."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group

from verl_lite.single_controller.ray import parking

DEFAULT_PLACEMENT_TIMEOUT_S = 60.0


class Role(enum.Enum):
    """The jobs a worker group can do in RL training; the trainer maps each to a resource pool."""

    Actor = "actor"
    Rollout = "rollout"
    Critic = "critic"
    RewardModel = "reward_model"


class ResourcePoolError(RuntimeError):
    """A pool cannot be placed on the cluster (it asks for more than the cluster has)."""


class RayResourcePool:
    """Reserves ``process_on_nodes[i]`` worker slots on node ``i``, one placement group per node.

    Each slot is a bundle of one CPU (plus one GPU with ``use_gpu``). Ranks are laid out node by
    node in bundle order, so the same spec always gives the same rank → bundle map.
    ``max_colocate_count`` is how many worker processes may share one bundle (each actor asks
    for ``1 / max_colocate_count`` of it).
    """

    def __init__(
        self,
        process_on_nodes: list[int],
        use_gpu: bool = False,
        name_prefix: str = "pool",
        max_colocate_count: int = 1,
        placement_timeout_s: float = DEFAULT_PLACEMENT_TIMEOUT_S,
    ):
        if not process_on_nodes or any(int(n) < 1 for n in process_on_nodes):
            raise ValueError(
                f"resource pool {name_prefix!r}: process_on_nodes must list one positive process count "
                f"per node, got {process_on_nodes!r}."
            )
        self.process_on_nodes = [int(n) for n in process_on_nodes]
        self.use_gpu = use_gpu
        self.name_prefix = name_prefix
        self.max_colocate_count = max_colocate_count
        self.placement_timeout_s = placement_timeout_s
        self._pgs: list[PlacementGroup] | None = None
        # worker processes an earlier run left in this pool for a later one, and the Ray node they were
        # kept on (see parking)
        self.kept: list[tuple[tuple, list]] = []
        self.kept_on: str | None = None

    @property
    def shape(self) -> tuple:
        """What a kept pool must match to be taken for another run: name, slots per node, devices, sharing."""
        return (self.name_prefix, tuple(self.process_on_nodes), self.use_gpu, self.max_colocate_count)

    @property
    def world_size(self) -> int:
        """Total number of worker slots over all nodes."""
        return sum(self.process_on_nodes)

    @property
    def bundle(self) -> dict[str, float]:
        """Resources reserved for one worker slot."""
        return {"CPU": 1.0, "GPU": 1.0} if self.use_gpu else {"CPU": 1.0}

    def get_placement_groups(self) -> list[PlacementGroup]:
        """Create (once) and return the ready placement groups, one per node, in rank order."""
        if self._pgs is None:
            self._check_fits()
            targets = _pick_nodes(self.process_on_nodes, "GPU" if self.use_gpu else "CPU")
            pgs = []
            for i, (count, node_id) in enumerate(zip(self.process_on_nodes, targets)):
                pgs.append(
                    placement_group(
                        [dict(self.bundle) for _ in range(count)],
                        strategy="STRICT_PACK",
                        name=f"{self.name_prefix}_node{i}_{id(self):x}",
                        _soft_target_node_id=node_id,
                    )
                )
            self._wait_ready(pgs)
            self._pgs = pgs
        return self._pgs

    def slots(self) -> list[tuple[PlacementGroup, int, int, int]]:
        """``(placement_group, bundle_index, local_rank, local_world_size)`` for every rank in order."""
        return [
            (pg, bundle, bundle, len(pg.bundle_specs))
            for pg in self.get_placement_groups()
            for bundle in range(len(pg.bundle_specs))
        ]

    def release(self) -> None:
        """Remove the placement groups (the pool's actors must have been killed first)."""
        for pg in self._pgs or []:
            remove_placement_group(pg)
        self._pgs = None

    def _asked(self) -> str:
        kind = "GPU" if self.use_gpu else "CPU"
        return f"{self.process_on_nodes} {kind} slots per node ({self.world_size} in all)"

    def _check_fits(self) -> None:
        kind = "GPU" if self.use_gpu else "CPU"
        totals = [n["Resources"].get(kind, 0.0) for n in ray.nodes() if n["Alive"]]
        available = ray.available_resources().get(kind, 0.0)
        largest_node = max(totals, default=0.0)
        fits_cluster = self.world_size <= sum(totals) and max(self.process_on_nodes) <= largest_node
        # short now but not for the cluster: another run of this job may have kept its workers (parking),
        # which it ends within parking.KEEP_S; wait that long (at most the placement timeout) before
        # calling the pool too big
        deadline = time.monotonic() + min(self.placement_timeout_s, parking.KEEP_S + 1.0)
        while fits_cluster and self.world_size > available and time.monotonic() < deadline:
            time.sleep(0.2)
            available = ray.available_resources().get(kind, 0.0)
        if self.world_size > available or max(self.process_on_nodes) > largest_node:
            raise ResourcePoolError(
                f"resource pool {self.name_prefix!r} asks for {self._asked()} but the cluster has "
                f"{available:g} {kind} available (per-node totals {totals}); lower the pool spec or add "
                f"resources (e.g. ray.init(num_cpus=...))."
            )

    def _wait_ready(self, pgs: list[PlacementGroup]) -> None:
        ready, _ = ray.wait(
            [pg.ready() for pg in pgs], num_returns=len(pgs), timeout=self.placement_timeout_s
        )
        if len(ready) < len(pgs):
            for pg in pgs:
                remove_placement_group(pg)
            kind = "GPU" if self.use_gpu else "CPU"
            raise ResourcePoolError(
                f"resource pool {self.name_prefix!r} asks for {self._asked()} but could not be placed within "
                f"{self.placement_timeout_s:g} s; available now: "
                f"{ray.available_resources().get(kind, 0.0):g} {kind}."
            )


def _pick_nodes(counts: list[int], kind: str) -> list[str | None]:
    """Choose a distinct alive node (by id, largest first) for each pool node that fits on one."""
    nodes = sorted(
        ((n["Resources"].get(kind, 0.0), n["NodeID"]) for n in ray.nodes() if n["Alive"]),
        key=lambda item: (-item[0], item[1]),
    )
    used: set[str] = set()
    targets: list[str | None] = []
    for count in counts:
        choice = next((nid for cap, nid in nodes if nid not in used and cap >= count), None)
        if choice is not None:
            used.add(choice)
        targets.append(choice)
    return targets


@dataclass
class ResourcePoolManager:
    """Turns a pool spec (``{"global_pool": [n_per_node] * nnodes}``) and a role → pool map into pools."""

    resource_pool_spec: dict[str, list[int]]
    mapping: dict[Role, str]
    use_gpu: bool | None = None
    max_colocate_count: int = 1
    resource_pool_dict: dict[str, RayResourcePool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for role, pool in self.mapping.items():
            if pool not in self.resource_pool_spec:
                raise ValueError(
                    f"mapping[{role}] names pool {pool!r}, which is not in resource_pool_spec "
                    f"(known pools: {sorted(self.resource_pool_spec)})."
                )

    def create_resource_pool(self) -> None:
        """Create one ``RayResourcePool`` per spec entry and place them all (fails fast if they can't fit);
        a pool an earlier run kept (``parking``) with the same shape is taken as it is."""
        use_gpu = self.use_gpu if self.use_gpu is not None else ray.cluster_resources().get("GPU", 0) > 0
        pools = {
            name: RayResourcePool(
                process_on_nodes=process_on_nodes,
                use_gpu=use_gpu,
                name_prefix=name,
                max_colocate_count=self.max_colocate_count,
            )
            for name, process_on_nodes in self.resource_pool_spec.items()
        }
        kept = parking.take_pools([pool.shape for pool in pools.values()])
        if any(pool is None for pool in kept):
            parking.end_kept()  # a pool to place: what other runs kept frees its slots first
        for (name, pool), taken in zip(pools.items(), kept):
            if taken is None:
                pool.get_placement_groups()
            self.resource_pool_dict[name] = taken or pool

    def get_resource_pool(self, role: Role) -> RayResourcePool:
        """The pool a role is mapped to (after ``create_resource_pool``)."""
        if role not in self.mapping:
            raise KeyError(
                f"role {role} has no resource pool; mapped roles: {[r.name for r in self.mapping]}."
            )
        return self.resource_pool_dict[self.mapping[role]]

    def release(self) -> None:
        """Remove every pool's placement groups."""
        for pool in self.resource_pool_dict.values():
            pool.release()
        self.resource_pool_dict.clear()
