"""The kv config group: yaml defaults match the dataclass, overrides apply, bad values are named."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verl_lite.kv import KVStoreConfig

YAML = Path(__file__).resolve().parents[2] / "configs" / "kv" / "default.yaml"


def test_yaml_defaults_equal_the_dataclass_defaults_and_every_key_is_documented():
    lines = YAML.read_text().splitlines()
    loaded = KVStoreConfig.from_any(OmegaConf.load(YAML))
    assert loaded == KVStoreConfig()
    for i, line in enumerate(lines):
        if line and not line.startswith("#"):
            assert lines[i - 1].startswith("#"), f"key without a comment above it: {line}"


def test_keyword_overrides_win_over_the_config_object():
    cfg = KVStoreConfig.from_any({"num_storage_units": 4}, num_storage_units=3, name_prefix="mine")
    assert cfg.num_storage_units == 3 and cfg.name_prefix == "mine"
    assert cfg.index_name(1) == "mine_index_1"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"num_storage_units": 0}, "kv.num_storage_units=0 is invalid"),
        (
            {"num_storage_units": "two"},
            r"kv.num_storage_units='two' is invalid; use an integer >= 1, or null",
        ),
        ({"name_prefix": "a b"}, "kv.name_prefix='a b' is invalid"),
        (
            {"num_units": 2},
            r"unknown key 'kv.num_units' \(value 2\); valid keys here: name_prefix, num_storage_units",
        ),
    ],
)
def test_invalid_config_values_raise_one_sentence_naming_the_key(values, message):
    with pytest.raises(ValueError, match=message):
        KVStoreConfig.from_any(values)


def test_any_dataclass_with_the_same_keys_is_accepted():
    from dataclasses import dataclass

    @dataclass
    class Section:  # e.g. the kv section of a trainer's config dataclass
        num_storage_units: int = 1
        name_prefix: str = "mine"

    assert KVStoreConfig.from_any(Section()) == KVStoreConfig(num_storage_units=1, name_prefix="mine")
