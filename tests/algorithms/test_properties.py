"""Property tests: every estimator, loss and KL estimator stays finite on hostile inputs.

Inputs: rewards in [-1e3, 1e3] (uniform, only the extremes, or tied within a group), random masks
with some all-zero rows, and groups of 1 to 16 rows. Tensors come from a seeded generator, so
hypothesis explores the structure (group sizes, lengths, mask and reward kinds) cheaply.
"""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_lite.algorithms import get_adv_estimator_fn, get_policy_loss_fn, kl_penalty

ESTIMATORS = [
    "gae",
    "grpo",
    "rloo",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "remax",
    "opo",
    "grpo_passk",
    "gpg",
]
LOSSES = ["vanilla", "gspo", "sapo", "cispo", "gpg", "clip_cov", "kl_cov", "reinforce"]
AGG_MODES = [
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
]
SETTINGS = settings(max_examples=50, deadline=None)


@st.composite
def batches(draw):
    """A random batch: dict with token_level_rewards, response_mask, index, values, reward_baselines."""
    sizes = draw(st.lists(st.integers(1, 16), min_size=1, max_size=4))
    length = draw(st.integers(1, 8))
    reward_kind = draw(st.sampled_from(["uniform", "extreme", "tied"]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    rows = sum(sizes)
    index = [f"uid-{g}" for g, size in enumerate(sizes) for _ in range(size)]
    rewards = (torch.rand(rows, length, generator=gen) * 2 - 1) * 1e3
    if reward_kind == "extreme":
        rewards = torch.sign(rewards) * 1e3
    elif reward_kind == "tied":
        group_value = (torch.rand(len(sizes), generator=gen) * 2 - 1) * 1e3
        rewards = torch.zeros(rows, length)
        rewards[:, -1] = torch.repeat_interleave(group_value, torch.tensor(sizes))
    mask = (torch.rand(rows, length, generator=gen) < draw(st.sampled_from([0.3, 0.8, 1.0]))).float()
    mask[torch.rand(rows, generator=gen) < 0.25] = 0.0  # all-zero rows
    return {
        "token_level_rewards": rewards,
        "response_mask": mask,
        "index": index,
        "values": (torch.rand(rows, length, generator=gen) * 2 - 1) * 1e3,
        "reward_baselines": (torch.rand(rows, generator=gen) * 2 - 1) * 1e3,
    }


@SETTINGS
@given(batch=batches(), gamma=st.sampled_from([1.0, 0.99, 0.0]), lam=st.sampled_from([1.0, 0.95, 0.0]))
def test_every_estimator_is_finite_and_zero_outside_the_mask(batch, gamma, lam):
    outside = batch["response_mask"] == 0
    for name in ESTIMATORS:
        advantages, returns = get_adv_estimator_fn(name)(**batch, gamma=gamma, lam=lam)
        assert advantages.shape == returns.shape == batch["response_mask"].shape, name
        assert torch.isfinite(advantages).all() and torch.isfinite(returns).all(), name
        assert torch.all(advantages[outside] == 0) and torch.all(returns[outside] == 0), name


@SETTINGS
@given(batch=batches(), mode=st.sampled_from(AGG_MODES), log_prob_scale=st.sampled_from([0.1, 30.0]))
def test_every_policy_loss_and_its_gradient_are_finite(batch, mode, log_prob_scale):
    mask = batch["response_mask"]
    advantages, _ = get_adv_estimator_fn("grpo")(**batch)
    advantages = advantages + batch["token_level_rewards"] * mask  # raw +-1e3 advantages too
    gen = torch.Generator().manual_seed(len(batch["index"]))
    old_log_prob = -torch.rand(mask.shape, generator=gen) * log_prob_scale
    for name in LOSSES:
        log_prob = (-torch.rand(mask.shape, generator=gen) * log_prob_scale).requires_grad_(True)
        loss, metrics = get_policy_loss_fn(name)(old_log_prob, log_prob, advantages, mask, mode)
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(log_prob.grad).all(), name
        assert all(torch.isfinite(value) for value in metrics.values()), name
        assert {"pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"} <= set(metrics), name


@SETTINGS
@given(batch=batches(), name=st.sampled_from(["kl", "abs", "mse", "low_var_kl", "k3+", "k1+"]))
def test_every_kl_estimator_is_finite(batch, name):
    gen = torch.Generator().manual_seed(0)
    log_prob = (-torch.rand(batch["response_mask"].shape, generator=gen) * 60).requires_grad_(True)
    ref_log_prob = -torch.rand(batch["response_mask"].shape, generator=gen) * 60
    kl = kl_penalty(log_prob, ref_log_prob, name)
    kl.sum().backward()
    assert torch.isfinite(kl).all() and torch.isfinite(log_prob.grad).all()
