"""Advantages of one shard read from the store's rows (verl_lite/workers/advantage.py)."""

from types import SimpleNamespace

import torch
from tensordict import TensorDict

from verl_lite.protocol import to_jagged
from verl_lite.trainer.ppo.metrics import combine_shard_stats
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
    metrics = combine_shard_stats([stats])
    assert metrics["critic/remax_baseline/mean"] == 0.25
    # token mean of (0.75, 0.75, -0.25) = 1.25 / 3
    assert abs(metrics["critic/advantages/mean"] - 1.25 / 3) < 1e-6
