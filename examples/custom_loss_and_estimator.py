"""A custom policy loss and a custom advantage estimator, registered by name and chosen by override.

Run (the file is imported in every process, so its registrations reach the workers)::

    python -m verl_lite.main_ppo trainer.extensions=[examples/custom_loss_and_estimator.py] \\
        actor_rollout_ref.actor.policy_loss=tanh_clipped algorithm.adv_estimator=group_median
"""

from __future__ import annotations

import torch

from verl_lite.algorithms import EstimatorNeeds, agg_loss, register_adv_est, register_policy_loss


@register_policy_loss("tanh_clipped")
def compute_policy_loss_tanh_clipped(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, **agg_kwargs
):
    """PPO-like surrogate with a smooth ratio bound: L = -A * (1 + 0.2 * tanh((r - 1) / 0.2))."""
    ratio = torch.exp((log_prob - old_log_prob).clamp(-20, 20))
    smooth_ratio = 1 + 0.2 * torch.tanh((ratio - 1) / 0.2)
    loss = agg_loss(-advantages * smooth_ratio, response_mask, loss_agg_mode, **agg_kwargs)
    mask = response_mask.bool()
    metrics = {
        "pg_clipfrac": ((ratio - 1).abs() > 0.2)[mask].float().mean().nan_to_num(0.0).detach(),
        "pg_clipfrac_lower": torch.zeros(()),
        "ppo_kl": (old_log_prob - log_prob)[mask].mean().nan_to_num(0.0).detach(),
        "tanh_clipped_used": torch.ones(()),
    }
    return loss, metrics


# groups=True: it compares the samples of one prompt, so validation asks for rollout.n >= 2.
@register_adv_est("group_median", needs=EstimatorNeeds(groups=True))
def compute_group_median_advantage(
    token_level_rewards, response_mask, index, values=None, gamma=1.0, lam=1.0, config=None, **kwargs
):
    """Sequence score minus the median score of its prompt group, on every response token."""
    scores = (token_level_rewards * response_mask).sum(dim=-1)
    advantages = torch.zeros_like(scores)
    groups: dict = {}
    for row, uid in enumerate(index):
        groups.setdefault(uid, []).append(row)
    for rows in groups.values():
        group = scores[rows]
        advantages[rows] = group - group.median()
    advantages = advantages.unsqueeze(-1) * response_mask
    return advantages, advantages


def main() -> None:
    """Check both functions on hand-made numbers."""
    # Two prompts, three samples each; the score sits on the last response token.
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    response_mask = torch.ones(6, 2)
    rewards = torch.zeros(6, 2)
    rewards[:, -1] = scores
    advantages, _ = compute_group_median_advantage(rewards, response_mask, ["a", "a", "a", "b", "b", "b"])
    # group a: median(1, 0, 0) = 0 -> 1, 0, 0; group b: median(1, 1, 0) = 1 -> 0, 0, -1
    assert advantages[:, 0].tolist() == [1.0, 0.0, 0.0, 0.0, 0.0, -1.0], advantages
    # Unchanged policy: ratio 1, smooth ratio 1, loss = -mean(A) over 12 tokens = -(2 * 1 + 2 * -1) / 12 = 0.
    log_prob = torch.full((6, 2), -1.0)
    loss, metrics = compute_policy_loss_tanh_clipped(log_prob, log_prob, advantages, response_mask)
    assert loss.item() == 0.0 and metrics["pg_clipfrac"].item() == 0.0
    # A ratio of e (far outside the clip range) is bounded by 1 + 0.2 * tanh((e - 1) / 0.2) ~ 1.2.
    loss, metrics = compute_policy_loss_tanh_clipped(log_prob, log_prob + 1, torch.ones(6, 2), response_mask)
    assert abs(loss.item() + 1.2) < 1e-3 and metrics["pg_clipfrac"].item() == 1.0
    print(
        "group_median advantages:",
        advantages[:, 0].tolist(),
        "| tanh_clipped loss at ratio e:",
        round(loss.item(), 4),
    )


if __name__ == "__main__":
    main()
