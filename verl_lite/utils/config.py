"""Build typed config dataclasses from yaml / DictConfig / dict, with errors that name the key."""

from __future__ import annotations

import dataclasses
import os
import typing
from typing import Any, TypeVar

T = TypeVar("T")
# The installed verl_lite package: what ``${verl_lite:...}`` paths in configs are relative to.
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def register_package_resolver() -> None:
    """Let yaml configs name files shipped in the package: ``${verl_lite:assets/tiny_agent_model}``."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("verl_lite"):
        OmegaConf.register_new_resolver("verl_lite", lambda relative: os.path.join(PACKAGE_DIR, relative))


def from_config(cls: type[T], config: Any = None, where: str = "") -> T:
    """Build dataclass ``cls`` from a mapping (dict, DictConfig) or pass an instance through.

    Nested dataclass fields are built recursively; an unknown key raises ``ValueError`` naming
    the full key path, its value and the valid keys.
    """
    if isinstance(config, cls):
        return config
    if config is None:
        return cls()
    if not isinstance(config, dict):
        from omegaconf import OmegaConf

        if not OmegaConf.is_config(config):
            raise ValueError(f"{where.rstrip('.') or cls.__name__} must be a mapping, got {config!r}.")
        config = OmegaConf.to_container(config, resolve=True)
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in config.items():
        if key not in known:
            raise ValueError(
                f"unknown key {where + key!r} (value {value!r}); valid keys here: {', '.join(sorted(known))}."
            )
        sub = hints[key]
        if dataclasses.is_dataclass(sub) and value is not None:
            value = from_config(sub, value, f"{where}{key}.")
        kwargs[key] = value
    return cls(**kwargs)
