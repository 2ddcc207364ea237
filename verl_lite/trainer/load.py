"""The one config load: Hydra's composed config to the typed, defaults-resolved, validated ``PPOConfig``.

Every entry point goes through :func:`load_ppo_config` (``main_ppo``, the multi-agent Python API), so
verl's keys, the embedded defaults, the placement defaults, user extensions and validation are applied
the same way everywhere, before anything expensive starts.
"""

from __future__ import annotations

import sys
from typing import Any

from verl_lite.trainer.config import PPOConfig


def load_ppo_config(cfg: Any) -> PPOConfig:
    """Typed, defaults-resolved and validated config from a composed ``ppo_trainer`` config.

    verl keys verl_lite does not use are dropped first; a notice for each one set to a value verl_lite
    handles differently goes to stderr (once, before Ray starts). Raises ``ConfigError`` listing every
    problem found.
    """
    from verl_lite.trainer.placement import resolve_placement_defaults
    from verl_lite.trainer.validation import resolve_embedded_defaults, resolve_local_paths, validate_config
    from verl_lite.trainer.verl_compat import drop_verl_keys
    from verl_lite.utils.config import from_config
    from verl_lite.utils.extensions import load_extensions

    cfg, notices = drop_verl_keys(cfg)
    for notice in notices:
        print(f"verl_lite: {notice}", file=sys.stderr)
    config = resolve_local_paths(resolve_embedded_defaults(from_config(PPOConfig, cfg)))
    # user extensions may register trainer modes, whose placement the defaults follow
    load_extensions(config.trainer.extensions)
    config = resolve_placement_defaults(config)
    validate_config(config)
    return config


__all__ = ["load_ppo_config"]
