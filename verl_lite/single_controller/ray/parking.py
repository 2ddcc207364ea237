"""Worker processes kept from one run for the next one on the same Ray, so that runs in a row (a notebook's,
a sweep's, a test session's) start their workers once.

A worker process costs seconds of CPU to start (a Ray worker importing torch and transformers) before it
does any work. When a run ends, the resource pools it used are *kept* with the worker processes of its
groups that can host another run's worker (``Worker._vl_close`` said so; Ray does not restart them; CPU
pools only: on a GPU a kept process would hold device memory that the user may want back). The next run
takes a kept pool of the same shape instead of placing a new one, and a worker group whose environment
matches a kept group's, and whose roles are the ones those processes were started for or fewer, takes
those processes: each builds its workers anew in place (``Worker._vl_rebuild``), with a new rendezvous
port (its Ray class name, and so its process title, stays the first group's). What the next run does not
take is ended at once; what no run takes within ``KEEP_S`` seconds is ended then.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import ray

if TYPE_CHECKING:
    from verl_lite.single_controller.ray.resource_pool import RayResourcePool

KEEP_S = 60.0

_kept: list[RayResourcePool] = []  # each with the ``kept`` groups it holds
_lock = threading.Lock()
_timer: threading.Timer | None = None


def keep(pool: RayResourcePool, groups: list[tuple[tuple, list]]) -> None:
    """Keep ``pool`` and the worker processes of ``groups`` (``(group key, actor handles)``) for a later run;
    processes the pool still kept from an earlier run, which no group of this one took, are ended."""
    global _timer
    end_unused(pool)
    pool.kept, pool.kept_on = list(groups), _session()
    with _lock:
        _kept.append(pool)
        if _timer is not None:
            _timer.cancel()
        _timer = threading.Timer(KEEP_S, end_kept)
        _timer.daemon = True
        _timer.start()


def take_pools(shapes: list[tuple]) -> list[RayResourcePool | None]:
    """For each pool shape wanted (``RayResourcePool.shape``), a kept pool of that shape (it leaves the
    kept ones), or None."""
    session = _session()
    with _lock:
        _kept[:] = [pool for pool in _kept if pool.kept_on == session]  # a Ray shut down took the rest
        taken = []
        for shape in shapes:
            match = next((pool for pool in _kept if pool.shape == shape), None)
            if match is not None:
                _kept.remove(match)
            taken.append(match)
    return taken


def take_workers(pool: RayResourcePool, roles: tuple, env: tuple) -> tuple[tuple, list] | None:
    """``(key, processes)`` of the kept worker processes of ``pool`` that can host ``roles`` (``(role,
    module, class)`` triples) in environment ``env``, or None (they leave the pool).

    A process can host the roles its class was made for (``key[0]``) or fewer: its Ray class forwards
    each of those roles' methods, and the roles it does not build are never called. Same roles first."""
    fits = [
        (len(key[0]), i)
        for i, (key, _) in enumerate(pool.kept)
        if key[1] == env and set(roles) <= set(key[0])
    ]
    if not fits:
        return None
    return pool.kept.pop(min(fits)[1])


def end_unused(pool: RayResourcePool) -> None:
    """End the kept worker processes of ``pool`` that no group of the run took."""
    for _, workers in pool.kept:
        for worker in workers:
            ray.kill(worker)
    pool.kept = []


def end_kept() -> None:
    """End every kept pool and its worker processes."""
    with _lock:
        rest = list(_kept)
        _kept.clear()
    for pool in rest:
        _end(pool)


def _end(pool: RayResourcePool) -> None:
    if not ray.is_initialized() or pool.kept_on != _session():
        return
    end_unused(pool)
    pool.release()


def _session() -> str:
    """This process's node on the Ray it is connected to (a new Ray, a new node id)."""
    return ray.get_runtime_context().get_node_id()


__all__ = ["KEEP_S", "end_kept", "end_unused", "keep", "take_pools", "take_workers"]
