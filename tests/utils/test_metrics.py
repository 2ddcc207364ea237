"""Metric records and the one reducer (verl_lite/utils/metrics.py)."""

import torch

from verl_lite.utils.metrics import Metric, means, reduce_metrics, spread


def test_reduce_metrics_weighs_means_by_count_and_keeps_extremes_and_sums():
    # rank 0 saw scores (1, 2), rank 1 saw (6): mean = 9 / 3 = 3, max 6, min 1
    rank0 = {
        **spread("critic/score", torch.tensor([1.0, 2.0])),
        "rollout/requests_retried": Metric(2, reduce="sum"),
    }
    rank1 = {
        **spread("critic/score", torch.tensor([6.0])),
        "rollout/requests_retried": Metric(1, reduce="sum"),
    }
    assert reduce_metrics([rank0, rank1]) == {
        "critic/score/mean": 3.0,
        "critic/score/max": 6.0,
        "critic/score/min": 1.0,
        "rollout/requests_retried": 3.0,
    }


def test_means_averages_each_key_over_the_entries_that_report_it():
    # pg_loss: (1 + 3) / 2 = 2; kl_loss only in the second entry: 4
    records = means([{"pg_loss": 1.0}, {"pg_loss": 3.0, "kl_loss": 4.0}], prefix="actor/")
    assert reduce_metrics([records]) == {"actor/pg_loss": 2.0, "actor/kl_loss": 4.0}


def test_spread_of_nothing_reports_nothing():
    assert spread("critic/values", torch.tensor([])) == {}
