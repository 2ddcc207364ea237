"""Advantages for one group-aligned shard of trajectories: reward shaping, the estimator, statistics.

Runs inside a worker on rows read from the KV store, so the controller never sees token tensors;
it returns the new per-token fields and the step's ``Metric`` records under their logged names.
"""

from __future__ import annotations

from typing import Any

import torch

from verl_lite.algorithms import get_adv_estimator_fn, kl_penalty, masked_mean
from verl_lite.protocol import padded_from_jagged
from verl_lite.utils.metrics import Metric, spread
from verl_lite.workers.sequences import unpad_rows


def _padded(td, key: str, width: int) -> torch.Tensor:
    padded, _ = padded_from_jagged(td.get(key), 0, max_len=width)
    return padded.float()


def compute_shard_advantages(
    td, uids: list[str], algorithm: Any, kl_coef: float
) -> tuple[dict, dict[str, Metric]]:
    """Token rewards, advantages and returns for the rows of ``td`` (whole prompt groups).

    Args:
        td: TensorDict with jagged ``responses``, ``prompts``, ``token_level_scores`` and, when
            used, ``values``, ``old_log_probs``, ``ref_log_prob``, and (batch,) ``reward_baselines``
            (the greedy response's score, for estimators that declare ``greedy_baseline``).
        uids: the prompt-group id of every row (the estimator's ``index``).
        algorithm: the ``algorithm`` config (estimator name, gamma, lam, KL-in-reward settings).
        kl_coef: current coefficient of the KL penalty in the reward.

    Returns:
        ``(fields, metrics)``: jagged ``token_level_rewards``, ``advantages``, ``returns``; and the
        batch's ``Metric`` records (scores, rewards, advantages, returns, lengths, values).
    """
    lengths = td.get("responses").offsets().diff()
    width = max(1, int(lengths.max()))
    mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).float()
    if "response_mask" in td.keys():  # multi-turn: tool/observation tokens take no advantage
        mask = mask * _padded(td, "response_mask", width)
    scores = _padded(td, "token_level_scores", width)
    rewards = scores
    metrics: dict[str, Metric] = {}
    if algorithm.use_kl_in_reward:
        kl = kl_penalty(
            _padded(td, "old_log_probs", width), _padded(td, "ref_log_prob", width), algorithm.kl_penalty
        )
        rewards = scores - kl_coef * kl * mask
        metrics.update(spread("actor/reward_kl_penalty", masked_mean(kl, mask, dim=1)))
    values = _padded(td, "values", width) if "values" in td.keys() else None
    extras = {}
    if "reward_baselines" in td.keys():
        extras["reward_baselines"] = td.get("reward_baselines").reshape(-1).float()
        metrics.update(spread("critic/remax_baseline", extras["reward_baselines"]))
    advantages, returns = _estimate(algorithm, rewards, mask, uids, values, extras)
    valid = mask.bool()
    metrics.update(
        _step_metrics(
            (scores * mask).sum(dim=1),
            (rewards * mask).sum(dim=1),
            advantages[valid],
            returns[valid],
            lengths,
            td.get("prompts").offsets().diff(),
        )
    )
    if values is not None:
        metrics.update(spread("critic/values", values[valid]))
        residual, target = (returns - values)[valid].double(), returns[valid].double()
        return_sqsum = float((target - target.mean()).square().sum())
        if return_sqsum:  # one rank sees the whole batch, so the ratio is final here
            metrics["critic/vf_explained_var"] = Metric(1.0 - float(residual.square().sum()) / return_sqsum)
    lengths_list = lengths.tolist()
    fields = {
        "token_level_rewards": unpad_rows(rewards, lengths_list),
        "advantages": unpad_rows(advantages.float(), lengths_list),
        "returns": unpad_rows(returns.float(), lengths_list),
    }
    return fields, metrics


def advantages_from_tags(
    tags: list[dict], uids: list[str], algorithm: Any
) -> tuple[list[float], dict[str, Metric]]:
    """One advantage per trajectory for a ``sequence_level`` estimator, from the tags alone.

    Each tag gives the trajectory's ``score``, ``sampled_len`` (tokens the model sampled),
    ``response_len`` and ``prompt_len``. The estimator sees each response as one token holding its
    score (float32, as the stored ``token_level_scores`` are), which is what a sequence-level
    estimator reduces the tokens to; the metrics are the ones :func:`compute_shard_advantages`
    reports, each advantage weighted by its sampled tokens.
    """
    sampled = torch.tensor([int(t["sampled_len"]) for t in tags])
    mask = (sampled > 0).float().unsqueeze(-1)
    scores = torch.tensor([float(t["score"]) for t in tags], dtype=torch.float32).unsqueeze(-1) * mask
    advantages, returns = _estimate(algorithm, scores, mask, uids, None, {})
    metrics = _step_metrics(
        scores[:, 0],
        scores[:, 0],
        advantages[:, 0],
        returns[:, 0],
        torch.tensor([t["response_len"] for t in tags]),
        torch.tensor([t["prompt_len"] for t in tags]),
        token_weights=sampled,
    )
    return advantages[:, 0].tolist(), metrics


def _estimate(algorithm: Any, rewards, mask, uids: list[str], values, extras: dict):
    """``(advantages, returns)`` of the configured estimator."""
    return get_adv_estimator_fn(algorithm.adv_estimator)(
        token_level_rewards=rewards,
        response_mask=mask,
        index=uids,
        values=values,
        gamma=algorithm.gamma,
        lam=algorithm.lam,
        config=algorithm,
        **extras,
    )


def _step_metrics(
    scores, rewards, advantages, returns, response_lengths, prompt_lengths, token_weights=None
) -> dict:
    """The metrics every advantage computation reports: per-sequence scores and rewards, per-token
    advantages and returns (one per sequence counted ``token_weights`` times, when given), the lengths."""
    return {
        **spread("critic/score", scores),
        **spread("critic/rewards", rewards),
        **spread("critic/advantages", advantages, token_weights),
        **spread("critic/returns", returns, token_weights),
        **spread("response_length", response_lengths.float()),
        **spread("prompt_length", prompt_lengths.float()),
    }
