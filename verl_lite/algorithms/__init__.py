"""The RL math of verl_lite: advantage estimators, policy/value losses, KL terms and loss aggregation.

Pure torch (and numpy); nothing here imports Ray, Hydra, the KV store or any worker, so workers and
the trainer can both import it cheaply. Estimators and losses live in registries::

    from verl_lite.algorithms import get_adv_estimator_fn, get_policy_loss_fn, agg_loss

    advantages, returns = get_adv_estimator_fn("grpo")(
        token_level_rewards=rewards, response_mask=mask, index=uids, config=algo_cfg)
    loss, metrics = get_policy_loss_fn("vanilla")(old_log_prob, log_prob, advantages, mask,
                                                  loss_agg_mode="token-mean", config=actor_cfg)

Off-policy correction against the rollout's log-probs (truncated importance sampling, rejection)
is ``compute_rollout_correction``; its weights reach any loss through ``agg_loss(loss_weights=...)``.

Add a variant with ``@register_adv_est("name")`` or ``@register_policy_loss("name")`` in your own
module; the formulas and their config keys are in ``docs/algorithms.md``.
"""

# Importing a module registers what it defines; group_advantages and covariance_losses add
# entries to the registries of advantages and policy_losses.
from .advantages import (
    ADV_ESTIMATORS,
    AdvantageEstimatorFn,
    EstimatorNeeds,
    compute_discounted_returns,
    compute_gae_advantage_return,
    get_adv_estimator_fn,
    get_adv_estimator_needs,
    register_adv_est,
)
from .aggregation import LOSS_AGG_MODES, agg_loss, register_loss_agg_mode
from .config import PolicyLossConfig, config_get
from .covariance_losses import token_covariance
from .group_advantages import compute_grpo_outcome_advantage, group_ids, sequence_scores
from .joint_return_advantages import joint_return_advantage
from .kl import (
    KL_CONTROLLERS,
    KL_PENALTIES,
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    build_kl_controller,
    kl_penalty,
)
from .policy_losses import POLICY_LOSSES, PolicyLossFn, get_policy_loss_fn, register_policy_loss
from .rollout_correction import (
    RATIO_LEVELS,
    RolloutCorrection,
    RolloutCorrectionConfig,
    compute_rollout_correction,
    rollout_correction_problems,
)
from .token_stats import entropy_from_logits, masked_mean, masked_sum, masked_var, masked_whiten
from .value import compute_value_loss

__all__ = [
    "ADV_ESTIMATORS",
    "KL_CONTROLLERS",
    "KL_PENALTIES",
    "LOSS_AGG_MODES",
    "POLICY_LOSSES",
    "RATIO_LEVELS",
    "AdaptiveKLController",
    "AdvantageEstimatorFn",
    "EstimatorNeeds",
    "FixedKLController",
    "PolicyLossConfig",
    "PolicyLossFn",
    "RolloutCorrection",
    "RolloutCorrectionConfig",
    "agg_loss",
    "apply_kl_penalty",
    "build_kl_controller",
    "compute_discounted_returns",
    "compute_gae_advantage_return",
    "compute_rollout_correction",
    "compute_grpo_outcome_advantage",
    "compute_value_loss",
    "config_get",
    "entropy_from_logits",
    "get_adv_estimator_fn",
    "get_adv_estimator_needs",
    "get_policy_loss_fn",
    "group_ids",
    "kl_penalty",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "register_adv_est",
    "joint_return_advantage",
    "register_loss_agg_mode",
    "register_policy_loss",
    "rollout_correction_problems",
    "sequence_scores",
    "token_covariance",
]
