"""The one config load: Hydra's composed config to the typed, defaults-resolved, validated ``PPOConfig``.

Every entry point goes through :func:`load_ppo_config` (``main_ppo``, the multi-agent Python API), so
verl's keys, the embedded defaults, the placement defaults, user extensions and validation are applied
the same way everywhere, before anything expensive starts. Callers without Hydra's command line (the
multi-agent API, tests) compose the packaged configs with :func:`compose_config`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from verl_lite.trainer.config import PPOConfig

CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


def compose_config(config_name: str, overrides: Sequence[str] = ()) -> Any:
    """The packaged ``configs/<config_name>.yaml`` with Hydra ``overrides`` applied, as
    ``python -m verl_lite.main_* --config-name <config_name> <overrides>`` composes it.

    verl's spellings in ``overrides`` are translated first (``verl_compat``): notices go to stderr, and
    a refused verl value raises ``ConfigError``.
    """
    from hydra import compose, initialize_config_dir

    from verl_lite.trainer.verl_compat import print_notices, translate_overrides
    from verl_lite.utils.config import register_package_resolver

    overrides, notices = translate_overrides(overrides)
    print_notices(notices)
    register_package_resolver()  # the configs name packaged files as ${verl_lite:...}
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name, overrides=overrides)


def load_ppo_config(cfg: Any) -> PPOConfig:
    """Typed, defaults-resolved and validated config from a composed ``ppo_trainer`` config.

    Raises ``ConfigError`` listing every problem found. (verl's keys were translated on the command
    line, before Hydra composed ``cfg``.)
    """
    from verl_lite.trainer.placement import resolve_placement_defaults
    from verl_lite.trainer.runtime import extension_entries
    from verl_lite.trainer.validation import resolve_embedded_defaults, resolve_local_paths, validate_config
    from verl_lite.utils.config import from_config
    from verl_lite.utils.extensions import load_extensions

    config = resolve_local_paths(resolve_embedded_defaults(with_generated_data(from_config(PPOConfig, cfg))))
    # user extensions may register trainer modes, whose placement the defaults follow
    load_extensions(extension_entries(config))
    config = resolve_placement_defaults(config)
    validate_config(config)
    return config


def with_generated_data(config: PPOConfig) -> PPOConfig:
    """Write ``data.reasoning_gym``'s rows under the run folder and point the data files at them.

    Raises ``ConfigError`` when ``data.reasoning_gym`` is invalid (before anything is written).
    """
    from verl_lite.data.reasoning_gym import reasoning_gym_problems, write_reasoning_gym_files
    from verl_lite.trainer.validation import ConfigError

    data = config.data
    problems = reasoning_gym_problems(data.reasoning_gym, data.train_files, data.val_files)
    if problems:
        raise ConfigError("invalid configuration:\n- " + "\n- ".join(problems))
    if data.reasoning_gym.generators:
        out_dir = os.path.abspath(os.path.join(config.trainer.run_path, "reasoning_gym"))
        data.train_files, data.val_files = write_reasoning_gym_files(data.reasoning_gym, out_dir)
    return config


__all__ = ["CONFIG_DIR", "compose_config", "load_ppo_config", "with_generated_data"]
