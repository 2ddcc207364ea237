"""The controller's own metrics: those read from trajectory tags (accuracy, lengths, agents, staleness).

What workers measure comes back as ``verl_lite.utils.metrics.Metric`` records, reduced there.
"""

from __future__ import annotations

from collections import Counter, defaultdict


def tag_metrics(tags: list[dict], max_response_length: int) -> dict[str, float]:
    """Accuracy, response-length clip ratio and ``reward_extra/<name>/mean`` (numeric fields the reward
    function returned besides score and acc) read from trajectory tags (no tensors involved)."""
    if not tags:
        return {}
    lengths = [t.get("response_len", 0) for t in tags]
    out = {"response_length/clip_ratio": sum(n >= max_response_length for n in lengths) / len(lengths)}
    accs = [t["acc"] for t in tags if "acc" in t]
    if accs:
        out["critic/acc/mean"] = sum(accs) / len(accs)
    extras: dict[str, list[float]] = defaultdict(list)
    for tag in tags:
        for name, value in tag.get("reward_extra", {}).items():
            extras[name].append(value)
    for name, values in extras.items():
        out[f"reward_extra/{name}/mean"] = sum(values) / len(values)
    out.update(agent_metrics(tags))
    return out


def agent_metrics(tags: list[dict]) -> dict[str, float]:
    """``agent/num_turns/{mean,max,min}``, ``agent/tool_calls/{mean,max,min}``, ``agent/tool_errors`` (the
    step's total), ``agent/tool_latency_s/mean`` and the agent loops' other counters (means), from the
    trajectory tags the agent-loop workers wrote."""
    turns = [float(t["num_turns"]) for t in tags if "num_turns" in t]
    if not turns:
        return {}
    out = _spread("agent/num_turns", turns)
    counters: dict[str, list[float]] = defaultdict(list)
    for tag in tags:
        for name, value in tag.get("agent", {}).items():
            counters[name].append(float(value))
    calls = counters.pop("tool_calls", None)
    if calls:
        out.update(_spread("agent/tool_calls", calls))
    errors = counters.pop("tool_errors", None)
    if errors:
        out["agent/tool_errors"] = sum(errors)
    latency = counters.pop("tool_latency_s", None)
    if latency:
        timed = [v for v, n in zip(latency, calls or latency) if n] or latency
        out["agent/tool_latency_s/mean"] = sum(timed) / len(timed)
    for name, values in counters.items():
        out[f"agent/{name}/mean"] = sum(values) / len(values)
    return out


def _spread(name: str, values: list[float]) -> dict[str, float]:
    return {f"{name}/mean": sum(values) / len(values), f"{name}/max": max(values), f"{name}/min": min(values)}


def validation_metrics(tags: list[dict], n: int) -> dict[str, float]:
    """``val-core/<data_source>/acc/mean@n``, and with n > 1 ``best@n`` and ``maj@n``, from validation tags.

    ``best@n``: share of prompts with at least one correct sample. ``maj@n``: share of prompts whose
    majority answer (the most frequent ``pred`` the scorer extracted; ties go to the first seen) is
    correct; reported only when the scorer returns ``pred``.
    """
    by_source: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for tag in tags:
        by_source[tag.get("data_source", "unknown")][tag["uid"]].append(tag)
    out = {}
    for source, groups in by_source.items():
        accs = [float(t.get("acc", 0.0)) for group in groups.values() for t in group]
        out[f"val-core/{source}/acc/mean@{n}"] = sum(accs) / len(accs)
        if n > 1:
            best = [max(float(t.get("acc", 0.0)) for t in group) for group in groups.values()]
            out[f"val-core/{source}/acc/best@{n}"] = sum(best) / len(best)
            if any("pred" in t for group in groups.values() for t in group):
                majority = [_majority_vote_acc(group) for group in groups.values()]
                out[f"val-core/{source}/acc/maj@{n}"] = sum(majority) / len(majority)
    return out


def _majority_vote_acc(group: list[dict]) -> float:
    """Accuracy of the most frequent extracted answer of one prompt's samples (0 when none has one)."""
    votes = Counter(t["pred"] for t in group if t.get("pred") is not None)
    if not votes:
        return 0.0
    answer = votes.most_common(1)[0][0]
    return float(next(t.get("acc", 0.0) for t in group if t.get("pred") == answer))


def staleness_metrics(tags: list[dict], trainer_version: int) -> dict[str, float]:
    """``async/staleness/{mean,max}``: weight versions between the trainer and each trajectory's oldest token.

    Args:
        tags: the trained trajectories' tags (``min_weight_version``; a server's initial -1, the
            weights it loaded at start, counts as version 0).
        trainer_version: the version of the weights being updated (the actor after that many updates).
    """
    ages = [trainer_version - max(int(t.get("min_weight_version", -1)), 0) for t in tags] or [0]
    return {"async/staleness/mean": sum(ages) / len(ages), "async/staleness/max": float(max(ages))}
