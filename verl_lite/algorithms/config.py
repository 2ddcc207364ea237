"""Hyperparameters for the algorithm functions, read from whatever config object the caller holds.

Estimators and losses accept ``config=None``, a plain ``dict``, an OmegaConf ``DictConfig`` or any
object with attributes (for example a trainer's frozen dataclass). ``config_get`` is the single
reader for all of them; ``PolicyLossConfig`` is the typed home of the policy-loss knobs, and
``PolicyLossConfig.from_any`` turns any of the config shapes above into one, and
``policy_loss_problems`` states its valid ranges (used on construction and by the trainer's
config validation, so both say the same thing).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["PolicyLossConfig", "config_get", "policy_loss_problems"]

_MISSING = object()


def config_get(config: Any, key: str, default: Any = None) -> Any:
    """Return ``config[key]`` or ``config.key``, or ``default`` when the key is absent or None.

    Args:
        config: None, a mapping (``dict``, ``DictConfig``) or an object with attributes.
        key: the hyperparameter name, e.g. ``"norm_adv_by_std_in_grpo"``.
        default: the value used when ``config`` is None or lacks ``key``.

    Returns:
        The configured value, or ``default``. A value explicitly set to None also yields
        ``default``, so yaml files may leave a key empty to mean "use the default".
    """
    if config is None:
        return default
    if isinstance(config, Mapping):
        value = config.get(key, _MISSING)
    elif callable(getattr(config, "get", None)) and not dataclasses.is_dataclass(config):
        # OmegaConf DictConfig and dict-like wrappers that are not registered as Mapping.
        value = config.get(key, _MISSING)
    else:
        value = getattr(config, key, _MISSING)
    return default if value is _MISSING or value is None else value


@dataclass(frozen=True)
class PolicyLossConfig:
    """Hyperparameters of every registered policy loss; each loss reads only the fields it needs.

    Defaults reproduce standard PPO (symmetric 0.2 clip, dual-clip bound 3). Other config shapes
    (dict, DictConfig, attribute objects) are converted by ``PolicyLossConfig.from_any``.
    """

    # Lower PPO clip: the ratio is clipped below at 1 - clip_ratio_low (vanilla, gspo, clip_cov).
    clip_ratio_low: float = 0.2
    # Upper PPO clip: the ratio is clipped above at 1 + clip_ratio_high. DAPO's "clip-higher"
    # (https://arxiv.org/abs/2503.14476) raises it to 0.28; GSPO uses about 3e-4 / 4e-4.
    clip_ratio_high: float = 0.2
    # Dual-clip bound c > 1: for negative advantages the loss never exceeds -A * c
    # (https://arxiv.org/abs/1912.09729). Used by vanilla.
    clip_ratio_c: float = 3.0
    # |log pi - log pi_old| is clamped to this before exp(), so ratios stay finite (<= e^20).
    log_ratio_clamp: float = 20.0
    # SAPO (Soft Adaptive Policy Optimization) gate temperature for tokens with positive advantage.
    sapo_tau_pos: float = 1.0
    # SAPO temperature for negative advantages; larger decays off-policy negative tokens faster.
    sapo_tau_neg: float = 1.05
    # CISPO keeps every token and truncates the (stop-gradient) ratio to
    # [1 - cispo_clip_ratio_low, 1 + cispo_clip_ratio_high] (https://arxiv.org/abs/2506.13585).
    # 1.0 below means "no lower bound", as in the paper.
    cispo_clip_ratio_low: float = 1.0
    # CISPO upper truncation of the importance weight.
    cispo_clip_ratio_high: float = 0.28
    # Clip-Cov: fraction of valid tokens whose gradient is detached (https://arxiv.org/abs/2505.22617).
    clip_cov_ratio: float = 2e-4
    # Clip-Cov: only tokens with covariance in (clip_cov_lb, clip_cov_ub) are candidates.
    clip_cov_lb: float = 1.0
    # Clip-Cov: upper covariance bound of the candidates.
    clip_cov_ub: float = 5.0
    # KL-Cov: fraction of valid tokens (highest covariance first) that get the KL penalty.
    kl_cov_ratio: float = 2e-3
    # KL-Cov: weight of |log pi - log pi_old| on the selected tokens (verl calls it ppo_kl_coef).
    kl_cov_coef: float = 1.0

    def __post_init__(self) -> None:
        problems = policy_loss_problems(dataclasses.asdict(self))
        if problems:
            raise ValueError(" ".join(problems))

    @classmethod
    def from_any(cls, config: Any) -> PolicyLossConfig:
        """Build a ``PolicyLossConfig`` from None, itself, a mapping or an attribute object.

        Keys the config does not carry keep their defaults; unrelated keys are ignored, so a
        whole actor config can be passed as is.
        """
        if isinstance(config, cls):
            return config
        if config is None:
            return cls()
        values = {}
        for field in dataclasses.fields(cls):
            value = config_get(config, field.name, _MISSING)
            if value is not _MISSING:
                values[field.name] = value
        return cls(**values)


def is_number(value: Any) -> bool:
    """A real number: an int or float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# (field, test, what is valid) for every PolicyLossConfig field but the clip_cov band.
_RANGES = (
    ("clip_ratio_low", lambda v: v >= 0, "a number >= 0"),
    ("clip_ratio_high", lambda v: v >= 0, "a number >= 0"),
    ("clip_ratio_c", lambda v: v > 1, "a number > 1 (the dual-clip bound on -A * ratio)"),
    ("log_ratio_clamp", lambda v: v > 0, "a number > 0"),
    ("sapo_tau_pos", lambda v: v > 0, "a temperature > 0"),
    ("sapo_tau_neg", lambda v: v > 0, "a temperature > 0"),
    ("cispo_clip_ratio_low", lambda v: 0 <= v <= 1, "a number in [0, 1] (1 removes the lower bound)"),
    ("cispo_clip_ratio_high", lambda v: v >= 0, "a number >= 0"),
    ("clip_cov_ratio", lambda v: 0 <= v <= 1, "a fraction of tokens in [0, 1]"),
    ("kl_cov_ratio", lambda v: 0 <= v <= 1, "a fraction of tokens in [0, 1]"),
    ("kl_cov_coef", lambda v: v >= 0, "a number >= 0"),
)


def policy_loss_problems(values: Mapping[str, Any], prefix: str = "") -> list[str]:
    """One sentence per ``PolicyLossConfig`` value out of range; ``prefix`` is prepended to key names.

    Args:
        values: field name -> value; absent fields are not checked.
        prefix: where the keys live in the caller's config, e.g. ``"actor_rollout_ref.actor."``.
    """
    out = []
    for name, valid, what in _RANGES:
        if name not in values:
            continue
        value = values[name]
        if not is_number(value) or not valid(value):
            out.append(f"{prefix}{name}={value!r} is invalid; use {what}.")
    low, high = values.get("clip_cov_lb"), values.get("clip_cov_ub")
    for name, value in (("clip_cov_lb", low), ("clip_cov_ub", high)):
        if name in values and not is_number(value):
            out.append(f"{prefix}{name}={value!r} is invalid; use a number (a covariance bound).")
    if is_number(low) and is_number(high) and low >= high:
        out.append(
            f"{prefix}clip_cov_lb={low} must be < {prefix}clip_cov_ub={high} "
            "(the covariance band of Clip-Cov candidates); swap or widen them."
        )
    return out
