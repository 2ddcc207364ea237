"""Small, dependency-light helpers shared by every floor (registry, config validation, tracking)."""

from verl_lite.utils.registry import Registry

__all__ = ["Registry"]
