"""Advantages of one shard read from the store's rows (verl_lite/workers/advantage.py)."""

from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict

from verl_lite.protocol import to_jagged
from verl_lite.utils.metrics import reduce_metrics
from verl_lite.workers.advantage import compute_shard_advantages

ALGORITHM = SimpleNamespace(adv_estimator="remax", use_kl_in_reward=False, gamma=1.0, lam=1.0)


def test_remax_shard_subtracts_the_stored_greedy_baseline_and_logs_it():
    # Two samples of one prompt whose greedy response scored 0.25: scores 1 and 0 on the last
    # token -> advantages 1 - 0.25 = 0.75 (both tokens) and 0 - 0.25 = -0.25 (its one token).
    td = TensorDict(
        {
            "prompts": to_jagged([torch.tensor([5, 6]), torch.tensor([5, 6])]),
            "responses": to_jagged([torch.tensor([1, 2]), torch.tensor([3])]),
            "token_level_scores": to_jagged([torch.tensor([0.0, 1.0]), torch.tensor([0.0])]),
            "reward_baselines": torch.tensor([0.25, 0.25]),
        },
        batch_size=[2],
    )
    fields, stats = compute_shard_advantages(td, ["p", "p"], ALGORITHM, kl_coef=0.0)
    assert [row.tolist() for row in fields["advantages"].unbind()] == [[0.75, 0.75], [-0.25]]
    metrics = reduce_metrics([stats])
    assert metrics["critic/remax_baseline/mean"] == 0.25
    # token mean of (0.75, 0.75, -0.25) = 1.25 / 3
    assert abs(metrics["critic/advantages/mean"] - 1.25 / 3) < 1e-6


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "grpo_passk", "gpg"])
def test_a_sequence_level_estimator_gives_the_same_advantages_and_stats_from_tags(estimator):
    """The controller's path (scores from tags) and the worker's (token rows from the store) agree to the
    bit on advantages, and on the statistics up to float64 summation order."""
    from verl_lite.algorithms import get_adv_estimator_needs
    from verl_lite.workers.advantage import advantages_from_tags
    from verl_lite.workers.sequences import on_last_token

    assert get_adv_estimator_needs(estimator).sequence_level
    g = torch.Generator().manual_seed(0)
    uids = [f"p{i // 4}" for i in range(12)]  # 3 groups of 4; group p2 all equal
    scores = [float(torch.rand(1, generator=g)) if i < 8 else 0.5 for i in range(12)]
    lengths = [int(torch.randint(1, 9, (1,), generator=g)) for _ in uids]
    # multi-turn masks: observation tokens (0) inside; the last row ends in an observation
    masks = [
        [1] * (n // 2 + 1) + [0] * (n - n // 2 - 1) if i % 3 == 0 else [1] * n for i, n in enumerate(lengths)
    ]
    td = TensorDict(
        {
            "prompts": to_jagged([torch.tensor([5, 6, 7])] * 12),
            "responses": to_jagged([torch.arange(n) for n in lengths]),
            "response_mask": to_jagged([torch.tensor(m) for m in masks]),
            "token_level_scores": to_jagged(
                [on_last_token(n, s, m) for n, s, m in zip(lengths, scores, masks)]
            ),
        },
        batch_size=[12],
    )
    algorithm = SimpleNamespace(
        adv_estimator=estimator, use_kl_in_reward=False, gamma=1.0, lam=1.0, norm_adv_by_std_in_grpo=True
    )
    fields, stats = compute_shard_advantages(td, uids, algorithm, kl_coef=0.0)
    tags = [
        {"score": s, "sampled_len": sum(m), "response_len": n, "prompt_len": 3}
        for s, m, n in zip(scores, masks, lengths)
    ]
    advantages, tag_stats = advantages_from_tags(tags, uids, algorithm)
    for row, mask, advantage in zip(fields["advantages"].unbind(), masks, advantages):
        assert row.tolist() == [advantage * m for m in mask]  # bit-identical on sampled tokens, 0 elsewhere
    assert tag_stats.keys() == stats.keys()
    for key, value in stats.items():
        assert (tag_stats[key].count, tag_stats[key].reduce) == (value.count, value.reduce), key
        assert tag_stats[key].total == pytest.approx(value.total, rel=1e-12, abs=1e-12), key
