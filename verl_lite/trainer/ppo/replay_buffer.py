"""Decide which prompt groups are ready for training, from their trajectories' tags alone.

The ReplayBuffer runs in the controller and never touches a tensor. It registers each prompt group
it is given (``add_groups``: uid, the step it was submitted at, its data source) and learns the rest
from its trajectories' tags ``{uid}_{session}_{index}`` (tag ``uid``, the metric, the group's sample
count), from which the group's status follows (``verl_lite.trajectory.group_status``: pending,
running, finished or failure). Those tags are what each generation returned (``add_trajectories``),
or, while the rollout streams trajectories in as ``sample`` waits (``lists_store``), the store's
listing (``client.kv_list``).
``sample`` waits for enough finished groups, evicts failed groups, zero-variance groups (DAPO
dynamic sampling, https://arxiv.org/abs/2503.14476) and, in asynchronous modes, groups that are
too stale, asks ``refill_fn(k)`` for replacement prompts, and returns the oldest whole groups.
It never waits silently or without bounds: a wait longer than a few seconds prints what it waits
for, a scorer that fails on (nearly) every group stops the run with its own message, and refills
per call are bounded.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from verl_lite.kv.checkpoint import load_partition_state_dict, partition_state_dict
from verl_lite.kv.client import KVClient
from verl_lite.kv.meta import KVBatchMeta
from verl_lite.trajectory import (
    FAILURE,
    FINISHED,
    GROUP_STATUSES,
    PENDING,
    RUNNING,
    group_of,
    group_status,
    group_tag,
    parse_trajectory_key,
)
from verl_lite.utils.errors import RunError, RunTimeout

RefillFn = Callable[[int], Any]
"""``refill_fn(k)``: submit ``k`` new prompt groups (register them, start their rollouts)."""

# trainer.replay_buffer.off_policy_strategy values.
OFF_POLICY_STRATEGIES = ("drop", "wait")
_EVICTED_MEMORY = 100_000  # evicted uids remembered, to clear trajectories that arrive late


@dataclass(frozen=True)
class ReplayBufferConfig:
    """How the buffer waits, filters and bounds staleness; validated on construction."""

    timeout_s: float = 600.0
    """Seconds ``sample`` waits for enough finished groups before raising ``TimeoutError``."""
    poll_interval_s: float = 0.05
    """Seconds between two reads of the partition's tags while waiting."""
    report_after_s: float = 10.0
    """A wait this long prints one line saying what it waits for; again after each doubling."""
    filter_groups_enable: bool = False
    """``algorithm.filter_groups.enable``: evict finished groups whose metric has zero variance (DAPO)."""
    filter_groups_metric: str = "acc"
    """``algorithm.filter_groups.metric``: trajectory tag holding the metric (e.g. ``acc``, ``score``)."""
    filter_groups_max_num_gen_batches: int = 4
    """``algorithm.filter_groups.max_num_gen_batches``: with filtering on, at most this many refill
    rounds per ``sample`` call; then ``sample`` fails once too few groups can still be ready
    (``<= 0``: no bound but ``timeout_s``)."""
    max_off_policy_threshold: int | None = None
    """Largest allowed ``global_step - group.global_steps``; ``None`` disables staleness control."""
    off_policy_strategy: str = "drop"
    """``drop``: evict groups older than the threshold and refill; ``wait``: hold sampling while
    an in-flight (pending/running) group is older than the threshold."""
    max_refill_batches: int = 8
    """``trainer.replay_buffer.max_refill_batches``: one ``sample`` call asks ``refill_fn`` for at
    most this many times ``batch_size`` replacement groups, whatever evicted them; then it fails
    once too few groups can still be ready (``<= 0``: no bound but ``timeout_s``)."""
    max_failure_fraction: float = 1.0
    """``reward.max_failure_fraction``: ``sample`` fails, with the scorer's message, once this
    fraction of the last ``failure_window`` scored groups failed to score."""
    failure_window: int = 32
    """``reward.failure_window``: how many of the most recently scored groups that fraction is over."""

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.poll_interval_s <= 0:
            raise ValueError(
                f"replay_buffer timeout_s={self.timeout_s} and poll_interval_s={self.poll_interval_s} must be > 0."
            )
        if self.max_off_policy_threshold is not None and self.max_off_policy_threshold < 0:
            raise ValueError(
                f"max_off_policy_threshold={self.max_off_policy_threshold} is invalid; use an integer >= 0 or null."
            )
        if self.off_policy_strategy not in OFF_POLICY_STRATEGIES:
            raise ValueError(
                f"off_policy_strategy={self.off_policy_strategy!r} is invalid; use one of {OFF_POLICY_STRATEGIES}."
            )
        if not 0 < self.max_failure_fraction <= 1 or self.failure_window < 1:
            raise ValueError(
                f"max_failure_fraction={self.max_failure_fraction} must be in (0, 1] and "
                f"failure_window={self.failure_window} >= 1."
            )

    @classmethod
    def from_ppo_config(cls, config: Any) -> ReplayBufferConfig:
        """The buffer settings of a ``PPOConfig``: ``trainer.sample_timeout_s``,
        ``algorithm.filter_groups.*`` and ``trainer.replay_buffer.*``."""
        filter_groups, staleness = config.algorithm.filter_groups, config.trainer.replay_buffer
        return cls(
            timeout_s=config.trainer.sample_timeout_s,
            filter_groups_enable=filter_groups.enable,
            filter_groups_metric=filter_groups.metric,
            filter_groups_max_num_gen_batches=filter_groups.max_num_gen_batches,
            max_off_policy_threshold=staleness.max_off_policy_threshold,
            off_policy_strategy=staleness.off_policy_strategy,
            max_refill_batches=staleness.max_refill_batches,
            max_failure_fraction=config.reward.max_failure_fraction,
            failure_window=config.reward.failure_window,
        )


@dataclass
class _Group:
    """What the tags say about one prompt group."""

    uid: str
    tag: dict
    trajectories: list[tuple[str, dict]] = field(default_factory=list)

    @property
    def status(self) -> str:
        return group_status([tag for _, tag in self.trajectories])[0]

    @property
    def error(self) -> str | None:
        return group_status([tag for _, tag in self.trajectories])[1]

    @property
    def global_steps(self) -> int:
        return int(self.tag.get("global_steps", 0))

    def age_key(self) -> tuple:
        return (self.global_steps, self.tag.get("seq", float("inf")), self.uid)

    def keys(self) -> list[str]:
        return [key for key, _ in self.trajectories]


class ReplayBuffer:
    """Hands out finished prompt groups of a KV partition, oldest first; metadata only."""

    def __init__(
        self,
        config: ReplayBufferConfig | None = None,
        client: KVClient | None = None,
        refill_fn: RefillFn | None = None,
    ):
        if client is None:
            from verl_lite.kv.store import get_kv_client

            client = get_kv_client()
        self.config = config or ReplayBufferConfig()
        self.client = client
        self.refill_fn = refill_fn
        self._seq = 0
        # per partition: the tags of the groups submitted and not yet released or evicted, by uid
        self._groups: dict[str, dict[str, dict]] = {}
        self._sampled: dict[str, set[str]] = {}
        self._evicted: OrderedDict[str, None] = OrderedDict()
        # per partition: the last ``failure_window`` scored groups as (uid, error or None, data_source)
        self._outcomes: dict[str, deque[tuple[str, str | None, str]]] = {}
        self._judged: dict[str, set[str]] = {}  # uids already in ``_outcomes``
        self.last_sample_polls = 0
        # True: list the store's tags on every poll; False: know only the trajectories handed over
        self.lists_store = True
        # per partition: ``{key: tag}`` of the trajectories handed over and not cleared yet
        self._returned: dict[str, dict[str, dict]] = {}

    # ---------------------------------------------------------------------------- submission
    def add_groups(
        self,
        uids: Sequence[str],
        global_steps: int,
        partition_id: str = "train",
        tags: Sequence[dict] | None = None,
    ) -> KVBatchMeta:
        """Register new prompt groups as pending (``tags`` adds per-group entries); their uids and tags."""
        registry = self._groups.setdefault(partition_id, {})
        marker_tags = []
        for i, uid in enumerate(uids):
            extra = dict(tags[i]) if tags else {}
            registry[uid] = group_tag(uid, global_steps, seq=self._seq, **extra)
            marker_tags.append(registry[uid])
            self._seq += 1
        self._sampled.setdefault(partition_id, set())
        return KVBatchMeta(
            keys=list(uids), tags=marker_tags, partition_id=partition_id, global_step=global_steps
        )

    def resubmit(self, uids: Sequence[str], global_steps: int, partition_id: str = "train") -> KVBatchMeta:
        """Groups generated again as of ``global_steps`` (their age counts from there); their uids and tags."""
        registry = self._groups[partition_id]
        for uid in uids:
            registry[uid]["global_steps"] = int(global_steps)
        return KVBatchMeta(
            keys=list(uids),
            tags=[registry[uid] for uid in uids],
            partition_id=partition_id,
            global_step=global_steps,
        )

    def add_trajectories(self, trajectories: KVBatchMeta) -> None:
        """What a generation returned, its trajectories' keys and tags: ``sample`` reads them from here
        instead of listing the store (ignored when ``lists_store``)."""
        if not self.lists_store:
            returned = self._returned.setdefault(trajectories.partition_id, {})
            returned.update(zip(trajectories.keys, trajectories.tags))

    def release(self, trajectories: KVBatchMeta) -> None:
        """Done with these trajectories: clear them from the store and forget their groups."""
        partition_id = trajectories.partition_id
        self._clear(trajectories.keys, partition_id)
        for uid in trajectories.group_uids():
            self._groups.get(partition_id, {}).pop(uid, None)
            self._sampled.get(partition_id, set()).discard(uid)

    def group_counts(self, partition_id: str = "train") -> dict[str, int]:
        """Groups per status (sampled groups not counted), for logging."""
        groups = self._scan(partition_id)
        return _count(g for g in groups.values() if g.uid not in self._sampled.get(partition_id, ()))

    def group_uids(self, partition_id: str, status: str) -> list[str]:
        """Uids of the groups with ``status``, oldest first (e.g. pending ones to resubmit on resume)."""
        groups = sorted(self._scan(partition_id).values(), key=_Group.age_key)
        return [g.uid for g in groups if g.status == status]

    # ------------------------------------------------------------------------------ sampling
    def sample(
        self, global_step: int, partition_id: str, batch_size: int
    ) -> tuple[KVBatchMeta, dict[str, float]]:
        """Wait for ``batch_size`` finished groups and return the oldest ones as whole groups.

        Args:
            global_step: the trainer's current step (staleness = ``global_step - group.global_steps``).
            partition_id: the KV partition to sample from.
            batch_size: number of prompt groups (not trajectories) to return.

        Returns:
            ``(meta, metrics)``: the trajectory keys and tags of the chosen groups (group order,
            oldest first; ``meta.group_uids()`` are their groups) and the eviction metrics and wait
            of this call.
        """
        cfg = self.config
        sampled = self._sampled.setdefault(partition_id, set())
        evicted = {"filter_groups/evicted": 0, "rollout_failure/evicted": 0, "off_policy/evicted": 0}
        start = time.monotonic()
        next_report = cfg.report_after_s
        self.last_sample_polls = 0
        refills = refilled_groups = 0
        while True:
            self.last_sample_polls += 1
            groups = self._scan(partition_id)
            live = {uid: g for uid, g in groups.items() if uid not in sampled}
            self._judge_scoring(live, groups, partition_id, global_step)
            removed = self._evict(live, global_step, partition_id, evicted)
            budget_spent = (
                0 < cfg.max_refill_batches and refilled_groups >= cfg.max_refill_batches * batch_size
            )
            refilled = (
                bool(removed)
                and self.refill_fn is not None
                and not self._refills_exhausted(refills)
                and not budget_spent
            )
            if refilled:
                self.refill_fn(removed)
                refills += 1
                refilled_groups += removed
            ready = sorted((g for g in live.values() if g.status == FINISHED), key=_Group.age_key)
            held = self._held(live, global_step)
            if len(ready) >= batch_size and not held:
                break
            in_flight = sum(g.status in (PENDING, RUNNING) for g in live.values())
            # (the replacements of this round are not in ``live`` yet: judge them on the next scan)
            if not refilled and len(ready) + in_flight < batch_size:
                if self._refills_exhausted(refills):
                    raise RunError(
                        self._filter_message(global_step, batch_size, len(ready), in_flight, refills, evicted)
                    )
                if budget_spent:
                    raise RunError(
                        self._refill_message(
                            partition_id, global_step, batch_size, len(ready), refilled_groups, evicted
                        )
                    )
            waited = time.monotonic() - start
            if waited > cfg.timeout_s:
                raise RunTimeout(
                    self._timeout_message(partition_id, global_step, batch_size, live, evicted, held)
                )
            if waited > next_report:
                print(self._wait_line(waited, global_step, batch_size, live, held), flush=True)
                next_report *= 2
            time.sleep(cfg.poll_interval_s)
        chosen = ready[:batch_size]
        sampled.update(g.uid for g in chosen)
        return self._meta(chosen, partition_id, global_step), {
            **{k: float(v) for k, v in evicted.items()},
            "replay_buffer/wait_s": time.monotonic() - start,
        }

    def _judge_scoring(
        self, live: dict[str, _Group], groups: dict[str, _Group], partition_id: str, global_step: int
    ) -> None:
        """Record newly scored groups; raise with the scorer's message once too many failed to score."""
        cfg = self.config
        outcomes = self._outcomes.setdefault(partition_id, deque(maxlen=cfg.failure_window))
        judged = self._judged.setdefault(partition_id, set())
        judged.intersection_update(groups)  # evicted or cleared groups are not seen again
        for g in sorted(live.values(), key=_Group.age_key):
            if g.status in (FINISHED, FAILURE) and g.uid not in judged:
                judged.add(g.uid)
                outcomes.append((g.uid, g.error, g.tag.get("data_source", "unknown")))
        failures = [(error, source) for _, error, source in outcomes if error is not None]
        if len(outcomes) < cfg.failure_window or len(failures) < cfg.max_failure_fraction * len(outcomes):
            return
        error, source = failures[-1]
        raise RunError(
            f"scoring failed for {len(failures)} of the last {len(outcomes)} prompt groups at global step "
            f"{global_step} (reward.max_failure_fraction={cfg.max_failure_fraction:g} of "
            f"reward.failure_window={cfg.failure_window}); the reward function raised, for "
            f"data_source={source!r}: {error}"
        )

    def _scan(self, partition_id: str) -> dict[str, _Group]:
        """The registered groups of the partition with their trajectories' tags; clears late trajectories
        of evicted groups."""
        if self.lists_store:
            listing = self.client.kv_list(partition_id)[partition_id]
        else:
            listing = self._returned.get(partition_id, {})
        groups = {uid: _Group(uid, tag) for uid, tag in self._groups.get(partition_id, {}).items()}
        by_group: dict[str, list[tuple[str, dict]]] = {}
        for key, tag in listing.items():
            by_group.setdefault(group_of(key, tag), []).append((key, tag))
        late = []
        for uid, trajectories in by_group.items():
            if uid in groups:
                groups[uid].trajectories = sorted(trajectories, key=_trajectory_order)
            elif uid in self._evicted:
                late.extend(key for key, _ in trajectories)
        if late:
            self._clear(late, partition_id)
        return groups

    def _clear(self, keys: list[str], partition_id: str) -> None:
        self.client.kv_clear(keys, partition_id)
        returned = self._returned.get(partition_id, {})
        for key in keys:
            returned.pop(key, None)

    def _evict(
        self, live: dict[str, _Group], global_step: int, partition_id: str, counts: dict[str, int]
    ) -> int:
        """Evict failed, zero-variance and (strategy ``drop``) too-stale groups from ``live``."""
        cfg = self.config
        reasons: dict[str, str] = {}
        for uid, g in live.items():
            if g.status == FAILURE:
                reasons[uid] = "rollout_failure/evicted"
            elif (
                cfg.filter_groups_enable
                and g.status == FINISHED
                and _zero_variance(g, cfg.filter_groups_metric)
            ):
                reasons[uid] = "filter_groups/evicted"
            elif (
                cfg.max_off_policy_threshold is not None
                and cfg.off_policy_strategy == "drop"
                and global_step - g.global_steps > cfg.max_off_policy_threshold
            ):
                reasons[uid] = "off_policy/evicted"
        if not reasons:
            return 0
        self._clear([k for uid in reasons for k in live[uid].keys()], partition_id)
        for uid, reason in reasons.items():
            counts[reason] += 1
            del live[uid]
            del self._groups[partition_id][uid]
            self._evicted[uid] = None
        while len(self._evicted) > _EVICTED_MEMORY:
            self._evicted.popitem(last=False)
        return len(reasons)

    def _refills_exhausted(self, refills: int) -> bool:
        """Whether DAPO filtering has used up its ``filter_groups_max_num_gen_batches`` refill rounds."""
        cfg = self.config
        bound = cfg.filter_groups_max_num_gen_batches
        return cfg.filter_groups_enable and self.refill_fn is not None and 0 < bound <= refills

    def _filter_message(
        self,
        global_step: int,
        batch_size: int,
        kept: int,
        in_flight: int,
        refills: int,
        evicted: dict[str, int],
    ) -> str:
        cfg = self.config
        limit = cfg.filter_groups_max_num_gen_batches
        return (
            f"ReplayBuffer.sample: DAPO dynamic sampling kept {kept} of the {batch_size} groups needed at "
            f"global step {global_step} ({in_flight} still generating) after {refills} extra generation "
            f"batch(es), the limit algorithm.filter_groups.max_num_gen_batches={limit}; "
            f"{evicted['filter_groups/evicted']} group(s) had the same {cfg.filter_groups_metric!r} in every "
            f"sample and {evicted['rollout_failure/evicted']} failed. Raise max_num_gen_batches (<= 0 removes "
            "the limit), sample more diversely (rollout.temperature, rollout.n), or set "
            "algorithm.filter_groups.enable=false."
        )

    def _refill_message(
        self,
        partition_id: str,
        global_step: int,
        batch_size: int,
        kept: int,
        refilled_groups: int,
        evicted: dict[str, int],
    ) -> str:
        reasons = ", ".join(f"{n} {k.split('/')[0]}" for k, n in evicted.items() if n) or "none"
        message = (
            f"ReplayBuffer.sample: only {kept} of the {batch_size} groups needed at global step {global_step} "
            f"are ready after {refilled_groups} replacement groups, the limit "
            f"trainer.replay_buffer.max_refill_batches={self.config.max_refill_batches} x {batch_size}; "
            f"evicted: {reasons}"
        )
        failures = [(e, s) for _, e, s in self._outcomes.get(partition_id, ()) if e is not None]
        if evicted["rollout_failure/evicted"] and failures:
            error, source = failures[-1]
            message += f"; the reward function last raised, for data_source={source!r}: {error}"
        return message + "."

    def _wait_line(
        self, waited: float, global_step: int, batch_size: int, live: dict[str, _Group], held: list[str]
    ) -> str:
        counts = _count(live.values())
        line = (
            f"ReplayBuffer: waiting {waited:.0f} s at global step {global_step} for "
            f"{max(batch_size - counts[FINISHED], 0)} of {batch_size} groups (pending: {counts[PENDING]}, "
            f"running: {counts[RUNNING]}, finished: {counts[FINISHED]}; gives up after "
            f"trainer.sample_timeout_s={self.config.timeout_s:g})"
        )
        if held:
            line += f"; held by {len(held)} group(s) at max_off_policy_threshold or older (e.g. {held[0]!r})"
        return line

    def _held(self, live: dict[str, _Group], global_step: int) -> list[str]:
        """In-flight groups sampling waits for (strategy ``wait`` only): those at the bound, which this step
        must train, since by the next one they would be past it (and any already past it)."""
        cfg = self.config
        if cfg.max_off_policy_threshold is None or cfg.off_policy_strategy != "wait":
            return []
        return [
            g.uid
            for g in live.values()
            if g.status in (PENDING, RUNNING) and global_step - g.global_steps >= cfg.max_off_policy_threshold
        ]

    def _meta(self, chosen: list[_Group], partition_id: str, global_step: int) -> KVBatchMeta:
        return KVBatchMeta(
            keys=[key for g in chosen for key, _ in g.trajectories],
            tags=[tag for g in chosen for _, tag in g.trajectories],
            partition_id=partition_id,
            global_step=global_step,
        )

    def _timeout_message(
        self,
        partition_id: str,
        global_step: int,
        batch_size: int,
        live: dict[str, _Group],
        evicted: dict[str, int],
        held: list[str],
    ) -> str:
        counts = _count(live.values())
        failed = counts[FAILURE] + evicted["rollout_failure/evicted"]
        message = (
            f"ReplayBuffer.sample: waited {self.config.timeout_s:g}s at global step {global_step} for "
            f"{batch_size} finished group(s) in partition {partition_id!r}; groups: {counts[PENDING]} pending, "
            f"{counts[RUNNING]} running, {counts[FINISHED]} finished, {failed} failed"
        )
        others = {k: v for k, v in evicted.items() if v and k != "rollout_failure/evicted"}
        if others:
            message += f" (also evicted: {others})"
        if held:
            message += (
                f"; sampling is held while {len(held)} in-flight group(s) at max_off_policy_threshold="
                f"{self.config.max_off_policy_threshold} steps old or older are generating (e.g. {held[0]!r})"
            )
        return message + "."

    # ------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The buffer's bookkeeping and a snapshot of each partition it used."""
        return {
            "seq": self._seq,
            "groups": {p: dict(groups) for p, groups in self._groups.items()},
            "sampled": {p: sorted(uids) for p, uids in self._sampled.items()},
            "evicted": list(self._evicted),
            "partitions": {p: partition_state_dict(self.client, p) for p in self._sampled},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; running groups become pending again (their rollouts are gone).

        Requeued groups lose their partial trajectories; ``group_uids(partition, "pending")`` lists
        the groups to resubmit.
        """
        self._seq = int(state["seq"])
        self._groups = {p: dict(groups) for p, groups in state["groups"].items()}
        self._sampled = {p: set(uids) for p, uids in state["sampled"].items()}
        self._evicted = OrderedDict.fromkeys(state["evicted"])
        for partition_id, snapshot in state["partitions"].items():
            load_partition_state_dict(self.client, snapshot)
            if not self.lists_store:
                self._returned[partition_id] = dict(snapshot["tags"])
            running = [g for g in self._scan(partition_id).values() if g.status == RUNNING]
            partial = [key for g in running for key, _ in g.trajectories]
            if partial:
                self._clear(partial, partition_id)


def _trajectory_order(item: tuple[str, dict]) -> tuple:
    try:
        _, session, index = parse_trajectory_key(item[0])
        return (0, session, index, item[0])
    except ValueError:
        return (1, 0, 0, item[0])


def _zero_variance(group: _Group, metric: str) -> bool:
    """True when every trajectory of the group has the same ``metric`` tag (no learning signal)."""
    values = []
    for key, tag in group.trajectories:
        if metric not in tag:
            raise KeyError(
                f"filter_groups metric {metric!r} is missing from the tag of trajectory {key!r} "
                f"(tag entries: {sorted(tag)}); set algorithm.filter_groups.metric to one of them."
            )
        values.append(float(tag[metric]))
    return len(values) > 0 and float(np.std(values)) == 0.0


def _count(groups) -> dict[str, int]:
    counts = dict.fromkeys(GROUP_STATUSES, 0)
    for g in groups:
        counts[g.status] = counts.get(g.status, 0) + 1
    return counts
