"""The base class of every worker actor: its place in the group and the entry point the group calls.

A worker learns its rank, world size, local rank and the rendezvous address from environment
variables the worker group sets when it creates the actor, so ``torch.distributed`` can be
initialised inside it with ``init_process_group("gloo" | "nccl")`` (``env://``). Do that in a
method (e.g. ``init_model``) rather than ``__init__``: every rank must exist before a rendezvous.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from verl_lite.transport import pack_tree, unpack_tree
from verl_lite.utils.extensions import load_extensions_from_env


@dataclass(frozen=True)
class MeshRank:
    """Where one worker sits in a named device mesh, as far as data dispatch cares."""

    dp_rank: int
    is_collect: bool


class Worker:
    """Base class for worker actors driven by a ``RayWorkerGroup``.

    Subclasses decorate methods with ``@register(dispatch_mode=...)``; the group binds a method of
    the same name that splits the input per rank, runs it on the workers and gathers the results.
    """

    def __init__(self) -> None:
        env = os.environ
        # Global rank (0 .. world_size - 1) and group size.
        self.rank = int(env.get("RANK", 0))
        self.world_size = int(env.get("WORLD_SIZE", 1))
        # Rank among the group's workers on this node, and how many of them the node holds.
        self.local_rank = int(env.get("LOCAL_RANK", 0))
        self.local_world_size = int(env.get("LOCAL_WORLD_SIZE", 1))
        # torch.distributed rendezvous: rank 0's node and a port that was free there.
        self.master_addr = env.get("MASTER_ADDR", "127.0.0.1")
        self.master_port = int(env.get("MASTER_PORT", 0) or 0)
        self._meshes: dict[str, MeshRank] = {}
        load_extensions_from_env()

    def register_mesh(self, mesh_name: str, dp_rank: int, is_collect: bool) -> None:
        """Declare this worker's data-parallel rank in ``mesh_name`` for mesh-aware dispatch.

        Workers that share a ``dp_rank`` (tensor/pipeline peers) receive the same data shard;
        only workers with ``is_collect=True`` have their outputs gathered (one per DP rank).
        """
        self._meshes[mesh_name] = MeshRank(dp_rank=int(dp_rank), is_collect=bool(is_collect))

    # ---- called by the worker group, not by users -------------------------------------------
    def _vl_mesh_rank(self, mesh_name: str) -> MeshRank | None:
        return self._meshes.get(mesh_name)

    def _vl_close(self) -> bool:
        """End what this worker holds (its process group included) so that its process can host another
        run's worker (``parking``); whether it can. Subclasses close their own resources first."""
        import gc

        import torch.distributed as dist

        gc.collect()  # a model's modules and hooks hold each other: free them now, not at some later pass
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        return True

    def _vl_rebuild(self, env: dict[str, str], kwargs: dict) -> None:
        """Become a new worker in this process, after ``_vl_close``: ``env`` (the new group's rank and
        rendezvous variables) into the environment, then ``__init__(**kwargs)``."""
        os.environ.update(env)
        self.__init__(**kwargs)

    def _vl_execute(self, method_name: str, args: tuple, kwargs: dict) -> Any:
        """Run ``method_name`` with arguments packed for transport and pack what it returns."""
        method = getattr(self, method_name)
        return pack_tree(method(*unpack_tree(args), **unpack_tree(kwargs)))
