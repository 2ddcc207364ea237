"""``Metric``: the one record a worker hands back per logged scalar, and the one reducer over ranks.

A worker names each quantity with its final logged name (``actor/pg_loss``, ``critic/score/mean``) and
says how shards of it combine; the controller merges every rank's records with :func:`reduce_metrics`
and logs the result as it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Metric:
    """One shard's part of a logged scalar: a ``total`` over ``count`` items, combined by ``reduce``.

    ``reduce``: ``"mean"`` (totals and counts add up; the value is total / count), ``"sum"`` (totals
    add up), ``"max"`` or ``"min"`` (the extreme of the shards' totals).
    """

    total: float
    count: float = 1.0
    reduce: str = "mean"

    def __add__(self, other: Metric) -> Metric:
        if self.reduce in ("max", "min"):
            pick = max if self.reduce == "max" else min
            return Metric(pick(self.total, other.total), 1.0, self.reduce)
        return Metric(self.total + other.total, self.count + other.count, self.reduce)

    @property
    def value(self) -> float:
        """The logged value of the (merged) record."""
        return self.total / max(self.count, 1.0) if self.reduce == "mean" else self.total


def spread(name: str, values: torch.Tensor, weights: torch.Tensor | None = None) -> dict[str, Metric]:
    """``name/mean``, ``name/max`` and ``name/min`` of ``values`` (none when it is empty); with ``weights``
    each value counts that many times (a per-sequence value over its tokens), and weight 0 drops it."""
    if weights is not None:
        kept = weights > 0
        values, weights = values[kept], weights[kept].double()
    if values.numel() == 0:
        return {}
    values = values.double()
    if weights is None:
        mean = Metric(float(values.sum()), float(values.numel()))
    else:
        mean = Metric(float((values * weights).sum()), float(weights.sum()))
    return {
        f"{name}/mean": mean,
        f"{name}/max": Metric(float(values.max()), reduce="max"),
        f"{name}/min": Metric(float(values.min()), reduce="min"),
    }


def mean_of(name: str, values: torch.Tensor) -> dict[str, Metric]:
    """``name``: the mean of ``values`` (none when it is empty)."""
    if values.numel() == 0:
        return {}
    return {name: Metric(float(values.double().sum()), float(values.numel()))}


def means(entries: Iterable[dict[str, float]], prefix: str = "") -> dict[str, Metric]:
    """Every key of ``entries`` as ``prefix + key``, averaged over the entries that report it."""
    return merge_metrics({prefix + k: Metric(float(v)) for k, v in entry.items()} for entry in entries)


def merge_metrics(parts: Iterable[dict[str, Metric]]) -> dict[str, Metric]:
    """The records of several shards combined name by name (still records: shards can keep merging)."""
    out: dict[str, Metric] = {}
    for part in parts:
        for name, metric in part.items():
            out[name] = out[name] + metric if name in out else metric
    return out


def reduce_metrics(parts: Iterable[dict[str, Metric]]) -> dict[str, float]:
    """The logged values of every rank's (or shard's) records: the controller's one reducer."""
    return {name: metric.value for name, metric in merge_metrics(parts).items()}
