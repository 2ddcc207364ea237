"""Build the configured reward manager, and check a ``reward`` config against a dataset before any run."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .config import RewardConfig
from .custom import BATCH_PARAM, SAMPLE_PARAMS, is_batch_reward_fn, load_custom_reward_fn
from .managers import REWARD_MANAGERS, BatchRewardManager, RewardManager
from .scorers import SCORERS, accepted_kwargs, known_data_sources, reasoning_gym

__all__ = ["build_reward_manager", "validate_reward_config"]


def build_reward_manager(config: RewardConfig | Any = None) -> RewardManager:
    """The manager named by ``reward.reward_manager``, scoring with the custom function if one is set.

    Without ``reward.custom_reward_function.path`` the manager uses ``default_compute_score`` (the
    built-in scorers, chosen per row by ``data_source``).
    """
    cfg = RewardConfig.from_any(config)
    cls = _manager_cls(cfg.reward_manager)
    fn = _load_custom(cfg)
    return cls(cfg, fn)


def validate_reward_config(config: RewardConfig | Any, data_sources: Iterable[str]) -> None:
    """Raise ValueError (one sentence) when ``config`` cannot score rows of ``data_sources``.

    Checks: the manager name is registered; with a custom function, that it loads and suits the
    manager and ``reward_kwargs``; without one, that every data source has a scorer, that some scorer
    takes each ``reward_kwargs`` key, and that the manager is not ``batch`` (which needs a custom one).
    """
    cfg = RewardConfig.from_any(config)
    cls = _manager_cls(cfg.reward_manager)
    fn = _load_custom(cfg)
    if fn is not None:
        wants_batch = issubclass(cls, BatchRewardManager)
        if wants_batch != is_batch_reward_fn(fn):
            form = "batch form (has batch_items)" if is_batch_reward_fn(fn) else "per-sample form"
            raise ValueError(
                f"reward.custom_reward_function.name={cfg.custom_reward_function.name!r} is the {form}, which "
                f"reward.reward_manager={cfg.reward_manager!r} cannot call; use "
                f"{'batch' if is_batch_reward_fn(fn) else 'naive or dapo'}."
            )
        return
    if issubclass(cls, BatchRewardManager):
        raise ValueError(
            "reward.reward_manager=batch needs reward.custom_reward_function.path set to a file with a "
            "batch_items function."
        )
    reasoning_gym.register_generators(data_sources)
    missing = sorted(set(data_sources) - set(SCORERS.names()))
    if missing:
        raise ValueError(
            f"data_source(s) {missing} have no reward scorer and reward.custom_reward_function.path is not "
            f"set; known data sources: {known_data_sources()}."
        )
    _check_default_kwargs(cfg.reward_kwargs, set(data_sources))


def _manager_cls(name: str) -> type[RewardManager]:
    if name not in REWARD_MANAGERS:
        raise ValueError(
            f"reward.reward_manager={name!r} is not a registered reward manager; known: "
            f"{', '.join(REWARD_MANAGERS.names())}."
        )
    return REWARD_MANAGERS.get(name)


def _load_custom(cfg: RewardConfig) -> Callable[..., Any] | None:
    """The custom function of ``cfg`` (None when no path is set), checked against ``reward_kwargs``."""
    custom = cfg.custom_reward_function
    if not custom.path:
        return None
    fn = load_custom_reward_fn(custom.path, custom.name)
    names = accepted_kwargs(fn)
    reserved = {BATCH_PARAM, *SAMPLE_PARAMS}
    unknown = sorted(k for k in cfg.reward_kwargs if k in reserved or (names is not None and k not in names))
    if unknown:
        raise ValueError(
            f"reward.reward_kwargs key(s) {unknown} cannot be passed to {custom.name!r} in {custom.path!r}; "
            "add them as parameters (or **kwargs) and do not reuse the standard argument names."
        )
    return fn


def _check_default_kwargs(reward_kwargs: dict[str, Any], data_sources: set[str]) -> None:
    """Every ``reward_kwargs`` key must be taken by at least one scorer of ``data_sources`` (catches typos)."""
    if not reward_kwargs or not data_sources:
        return
    taken: set[str] = set()
    for source in data_sources:
        names = accepted_kwargs(SCORERS.get(source))
        if names is None:
            return
        taken |= names
    unused = sorted(set(reward_kwargs) - taken)
    if unused:
        raise ValueError(
            f"reward.reward_kwargs key(s) {unused} are taken by no scorer of data sources {sorted(data_sources)}; "
            f"their scorers accept {sorted(taken - {'solution_str', 'ground_truth', 'extra_info'})}."
        )
