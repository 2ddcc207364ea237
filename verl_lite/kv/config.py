"""Configuration of the KV store (the ``kv`` config group, ``configs/kv/default.yaml``)."""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, is_dataclass
from typing import Any

from verl_lite.utils.config import from_config

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
# Names the store get_kv_client() finds by default; entry points set it in their Ray job's runtime env.
NAME_PREFIX_ENV = "VERL_LITE_KV_NAME_PREFIX"


@dataclass(frozen=True)
class KVStoreConfig:
    """Settings of one KV store; validated on construction, read-only afterwards."""

    num_storage_units: int | None = None
    """Index actors (``num_cpus=0``) holding keys, tags and where rows live; keys are spread over
    them by a hash of the key. ``None``: one per node of the Ray cluster when the store starts."""
    name_prefix: str = "verl_lite_kv"
    """Prefix of the named index actors (``{name_prefix}_index_{i}``); ``get_kv_client`` looks them up by it."""

    def __post_init__(self) -> None:
        units = self.num_storage_units
        if units is not None and (not isinstance(units, int) or isinstance(units, bool) or units < 1):
            raise ValueError(
                f"kv.num_storage_units={units!r} is invalid; use an integer >= 1, or null for one per node."
            )
        if not isinstance(self.name_prefix, str) or not _NAME.match(self.name_prefix):
            raise ValueError(
                f"kv.name_prefix={self.name_prefix!r} is invalid; use letters, digits, '_', '-' or '.'."
            )

    @classmethod
    def from_any(cls, config: Any = None, **overrides: Any) -> KVStoreConfig:
        """Build from a ``KVStoreConfig`` (or any dataclass with its keys), a dict or an OmegaConf node,
        with keyword overrides on top; an unknown key is an error naming it."""
        if is_dataclass(config) and not isinstance(config, type):
            config = asdict(config)
        if overrides:
            config = {**asdict(from_config(cls, config, "kv.")), **overrides}
        return from_config(cls, config, "kv.")

    @staticmethod
    def job_name_prefix() -> str:
        """The ``name_prefix`` of this Ray job's store: ``$VERL_LITE_KV_NAME_PREFIX``, else the default."""
        return os.environ.get(NAME_PREFIX_ENV) or KVStoreConfig.name_prefix

    def index_name(self, index: int) -> str:
        """Ray actor name of index actor ``index``."""
        return f"{self.name_prefix}_index_{index}"
