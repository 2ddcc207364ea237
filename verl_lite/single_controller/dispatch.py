"""Dispatch modes: how a group method splits its arguments over ranks and gathers the results.

A :class:`DispatchMode` pairs a ``dispatch`` function (arguments → one call per rank) with a
``collect`` function (per-rank outputs → the group method's return value). Modes live in the
``DISPATCH_MODES`` registry; ``Dispatch.X`` names the built-in ones and users add their own with
:func:`register_dispatch_mode`.

Splittable data is a ``TensorDict`` or any object with ``__len__``, ``chunk(n)`` and a ``concat``
static/class method (``verl_lite.kv.KVBatchMeta`` is one): TensorDicts are padded to a multiple of
the data-parallel size and the padding is stripped from the gathered result; other splittables
are cut into ``n`` contiguous parts without padding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tensordict import TensorDictBase

from verl_lite import protocol
from verl_lite.utils.registry import Registry


class GroupInfo(Protocol):
    """What a dispatch function may ask of the worker group it serves."""

    world_size: int

    def mesh_ranks(self, mesh_name: str) -> list: ...


@dataclass
class DispatchPlan:
    """One call per rank: positional and keyword arguments, plus context handed to ``collect``."""

    args: list[tuple]
    kwargs: list[dict]
    context: Any = None


DispatchFn = Callable[[GroupInfo, tuple, dict], DispatchPlan]
CollectFn = Callable[[GroupInfo, list, Any], Any]


@dataclass(frozen=True)
class DispatchMode:
    """A named pair of functions: ``dispatch(group, args, kwargs) -> DispatchPlan`` and
    ``collect(group, outputs, context) -> result``."""

    name: str
    dispatch: DispatchFn = field(compare=False)
    collect: CollectFn = field(compare=False)


DISPATCH_MODES: Registry[DispatchMode] = Registry("dispatch mode")


def register_dispatch_mode(name: str, dispatch_fn: DispatchFn, collect_fn: CollectFn) -> DispatchMode:
    """Register a user-defined dispatch mode and return it (pass it, or its name, to ``@register``)."""
    mode = DispatchMode(name=name, dispatch=dispatch_fn, collect=collect_fn)
    existing = DISPATCH_MODES._entries.get(name)
    if existing is not None and existing.dispatch is dispatch_fn and existing.collect is collect_fn:
        return existing
    DISPATCH_MODES.add(name, mode)
    return mode


def get_dispatch_mode(mode: DispatchMode | str) -> DispatchMode:
    """Resolve a mode given by object or by registered name (the error lists the known names)."""
    return mode if isinstance(mode, DispatchMode) else DISPATCH_MODES.get(mode)


# ---- splitting helpers ------------------------------------------------------------------------
def is_splittable(value: Any) -> bool:
    """True for values DP dispatch splits by rows: TensorDicts and KVBatchMeta-like objects."""
    if isinstance(value, TensorDictBase):
        return True
    return hasattr(value, "chunk") and hasattr(type(value), "concat") and hasattr(value, "__len__")


def split_rows(value: Any, parts: int) -> tuple[list, int]:
    """Split one splittable value into ``parts`` shards; returns ``(shards, pad_size)``."""
    if isinstance(value, TensorDictBase):
        padded, pad_size = protocol.pad_to_divisor(value, parts)
        return protocol.chunk(padded, parts), pad_size
    return list(value.chunk(parts)), 0


def merge_rows(outputs: Sequence[Any], pad_size: int) -> Any:
    """Concatenate per-shard outputs in order and strip the rows padding added before the split."""
    first = outputs[0]
    if isinstance(first, TensorDictBase):
        return protocol.unpad(protocol.concat(list(outputs)), pad_size)
    if is_splittable(first):
        return type(first).concat(list(outputs))
    return list(outputs)


def split_arguments(args: tuple, kwargs: dict, parts: int) -> tuple[list[tuple], list[dict], int]:
    """Split every splittable argument into ``parts`` shards; other arguments go to every shard."""
    pad_sizes = set()

    def shards_of(value):
        if not is_splittable(value):
            return [value] * parts
        shards, pad = split_rows(value, parts)
        pad_sizes.add((len(value), pad))
        return shards

    split_args = [shards_of(a) for a in args]
    split_kwargs = {k: shards_of(v) for k, v in kwargs.items()}
    if len({rows for rows, _ in pad_sizes}) > 1:
        raise ValueError(
            f"data-parallel dispatch got splittable arguments with different row counts "
            f"{sorted(rows for rows, _ in pad_sizes)}; all of them must have the same number of rows."
        )
    pad_size = next(iter(pad_sizes))[1] if pad_sizes else 0
    per_args = [tuple(s[i] for s in split_args) for i in range(parts)]
    per_kwargs = [{k: s[i] for k, s in split_kwargs.items()} for i in range(parts)]
    return per_args, per_kwargs, pad_size


# ---- built-in modes ---------------------------------------------------------------------------
def _broadcast(group: GroupInfo, args: tuple, kwargs: dict) -> DispatchPlan:
    n = group.world_size
    return DispatchPlan([args] * n, [kwargs] * n)


def _as_list(group: GroupInfo, outputs: list, context: Any) -> list:
    return list(outputs)


def _first(group: GroupInfo, outputs: list, context: Any) -> Any:
    return outputs[0]


def _scatter_lists(group: GroupInfo, args: tuple, kwargs: dict) -> DispatchPlan:
    """Lists of length world_size are scattered element-wise; anything else is broadcast."""
    n = group.world_size

    def pick(value, i):
        return value[i] if isinstance(value, list) and len(value) == n else value

    return DispatchPlan(
        [tuple(pick(a, i) for a in args) for i in range(n)],
        [{k: pick(v, i) for k, v in kwargs.items()} for i in range(n)],
    )


def _dp_compute(group: GroupInfo, args: tuple, kwargs: dict) -> DispatchPlan:
    n = group.world_size
    for name, value in [*((f"argument {i}", a) for i, a in enumerate(args)), *kwargs.items()]:
        if not isinstance(value, (list, tuple)) or len(value) != n:
            got = (
                f"{type(value).__name__} of length {len(value)}"
                if hasattr(value, "__len__")
                else type(value).__name__
            )
            raise ValueError(
                f"DP_COMPUTE needs every argument to be a list with one element per rank; "
                f"{name} is a {got} but the group has {n} workers."
            )
    return _scatter_lists(group, args, kwargs)


def _dp_compute_data(group: GroupInfo, args: tuple, kwargs: dict) -> DispatchPlan:
    per_args, per_kwargs, pad_size = split_arguments(args, kwargs, group.world_size)
    return DispatchPlan(per_args, per_kwargs, context=pad_size)


def _collect_data(group: GroupInfo, outputs: list, context: Any) -> Any:
    return merge_rows(outputs, context or 0)


class Dispatch:
    """The built-in dispatch modes (each is a registered :class:`DispatchMode`)."""

    ONE_TO_ALL = DispatchMode("one_to_all", _broadcast, _as_list)
    ALL_TO_ALL = DispatchMode("all_to_all", _scatter_lists, _as_list)
    RANK_ZERO = DispatchMode("rank_zero", _broadcast, _first)
    DP_COMPUTE = DispatchMode("dp_compute", _dp_compute, _as_list)
    DP_COMPUTE_DATA = DispatchMode("dp_compute_data", _dp_compute_data, _collect_data)


for _mode in (
    Dispatch.ONE_TO_ALL,
    Dispatch.ALL_TO_ALL,
    Dispatch.RANK_ZERO,
    Dispatch.DP_COMPUTE,
    Dispatch.DP_COMPUTE_DATA,
):
    DISPATCH_MODES.add(_mode.name, _mode)


# ---- mesh-aware dispatch ----------------------------------------------------------------------
def make_nd_dispatch(mesh_name: str) -> DispatchMode:
    """A mode that splits data over the data-parallel ranks of ``mesh_name``.

    Workers declare their place with ``Worker.register_mesh(mesh_name, dp_rank, is_collect)``.
    Ranks that share a DP rank receive the same shard; outputs are gathered from collect ranks
    only, ordered by DP rank, and concatenated like ``DP_COMPUTE_DATA``.
    """
    name = f"nd:{mesh_name}"
    if name in DISPATCH_MODES:
        return DISPATCH_MODES.get(name)

    def dispatch(group: GroupInfo, args: tuple, kwargs: dict) -> DispatchPlan:
        ranks = group.mesh_ranks(mesh_name)
        dp_size = max(r.dp_rank for r in ranks) + 1
        per_args, per_kwargs, pad_size = split_arguments(args, kwargs, dp_size)
        return DispatchPlan(
            [per_args[r.dp_rank] for r in ranks], [per_kwargs[r.dp_rank] for r in ranks], context=pad_size
        )

    def collect(group: GroupInfo, outputs: list, context: Any) -> Any:
        ranks = group.mesh_ranks(mesh_name)
        picked = sorted((r.dp_rank, out) for r, out in zip(ranks, outputs) if r.is_collect)
        return merge_rows([out for _, out in picked], context or 0)

    mode = DispatchMode(name, dispatch, collect)
    DISPATCH_MODES.add(name, mode)
    return mode
