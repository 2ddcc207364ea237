"""docs/configuration.md stays in step with the yaml configs, and the yaml with the config dataclasses."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import shutil
import sys
import typing
from pathlib import Path

import pytest

from verl_lite.trainer.config import PPOConfig
from verl_lite.trainer.sft.config import RMConfig, SFTConfig

ROOT = Path(__file__).resolve().parents[1]


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_config_docs", ROOT / "scripts" / "gen_config_docs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


def test_checked_in_doc_is_what_the_script_writes_from_the_yaml():
    stale = gen.differences(gen.DOC.read_text(), gen.render())
    assert not stale, "\n".join([*stale, "run: python scripts/gen_config_docs.py"])


def _edit(path: Path, pattern: str, replacement: str) -> str:
    """Replace the one match of ``pattern`` (multiline) in ``path``; returns the matched text."""
    text = path.read_text()
    matches = list(re.finditer(pattern, text, flags=re.MULTILINE))
    assert len(matches) == 1, f"{pattern!r} matches {len(matches)} times in {path}"
    path.write_text(text[: matches[0].start()] + replacement + text[matches[0].end() :])
    return matches[0].group(0)


def test_a_key_added_removed_or_given_a_new_default_in_the_yaml_is_reported(tmp_path):
    configs = tmp_path / "configs"
    shutil.copytree(gen.CONFIG_DIR, configs)
    doc = gen.render(configs)
    ppo = configs / "ppo_trainer.yaml"
    old_batch = _edit(ppo, r"(?<=^  train_batch_size: ).*$", "12345")
    _edit(ppo, r"^data:\n", "data:\n  # A new key.\n  knob: 3\n")
    _edit(ppo, r"^  # .*\n  seed: .*\n", "")  # data.seed and its comment
    old_export = _edit(configs / "sft_trainer.yaml", r"(?<=^  export_hf: ).*$", "maybe")

    stale = gen.differences(doc, gen.render(configs))

    ppo_title = "PPO / GRPO: `python -m verl_lite.main_ppo`"
    sft_title = "Supervised fine-tuning: `python -m verl_lite.main_sft`"
    assert stale == [
        f"data.knob ({ppo_title}) is in the yaml but not in the doc",
        f"data.seed ({ppo_title}) is in the doc but not in the yaml",
        f"data.train_batch_size ({ppo_title}) has default {old_batch} in the doc but 12345 in the yaml",
        f"trainer.export_hf ({sft_title}) has default {old_export} in the doc but maybe in the yaml",
    ]


def test_keys_share_the_comment_above_them_until_a_blank_line_and_an_uncommented_key_is_an_error():
    _, sections = gen.parse_yaml(
        "algorithm:\n  # Discount and GAE lambda.\n  gamma: 1.0\n  lam: 0.95\n", "a.yaml"
    )
    assert [(k.path, k.default, k.meaning) for k in sections[0].keys] == [
        ("algorithm.gamma", "1.0", "Discount and GAE lambda."),
        ("algorithm.lam", "0.95", "Discount and GAE lambda."),
    ]
    with pytest.raises(ValueError, match=r"b.yaml:5: key 'algorithm.lam' has no comment above it"):
        gen.parse_yaml("algorithm:\n  # Discount.\n  gamma: 1.0\n\n  lam: 0.95\n", "b.yaml")


def dataclass_keys(cls: type, prefix: str = "") -> set[str]:
    """Dotted paths of every leaf field; a dict default with keys (``ray_init``) counts its keys."""
    hints = typing.get_type_hints(cls)
    keys = set()
    for f in dataclasses.fields(cls):
        path = prefix + f.name
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(hints[f.name]):
            keys |= dataclass_keys(hints[f.name], path + ".")
        elif isinstance(default, dict) and default:
            keys |= {f"{path}.{key}" for key in default}
        else:
            keys.add(path)
    return keys


@pytest.mark.parametrize(
    "cls, title", [(PPOConfig, "PPO / GRPO"), (SFTConfig, "Supervised"), (RMConfig, "Reward")]
)
def test_every_dataclass_field_is_a_yaml_key_and_back(cls, title):
    documented = {key for where, key in gen.documented_rows(gen.render()) if where.startswith(title)}
    fields = dataclass_keys(cls)
    assert sorted(fields - documented) == [], f"{cls.__name__} fields missing from the yaml"
    assert sorted(documented - fields) == [], f"yaml keys {cls.__name__} does not define"


CONFIG_CLASSES = {"ppo_trainer": PPOConfig, "sft_trainer": SFTConfig, "rm_trainer": RMConfig}


def field_defaults(cls: type) -> dict[str, object]:
    """Every leaf field's default by dotted path, as the fields' defaults and factories build it (the
    path filling done in the top-level ``__post_init__`` of SFT/RM configs is not a default and is not run)."""
    out: dict[str, object] = {}
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        out.update(_leaves(f.name, default))
    return out


def _leaves(path: str, value: object) -> dict[str, object]:
    if dataclasses.is_dataclass(value):
        return {
            k: v
            for f in dataclasses.fields(value)
            for k, v in _leaves(f"{path}.{f.name}", getattr(value, f.name)).items()
        }
    if isinstance(value, dict) and value:
        return {f"{path}.{key}": v for key, v in value.items()}
    return {path: list(value) if isinstance(value, tuple) else value}


def yaml_defaults(config_dir: Path, name: str) -> dict[str, object]:
    """Every leaf of ``config_dir/<name>.yaml`` as Hydra composes it, interpolations resolved."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        tree = OmegaConf.to_container(compose(name), resolve=True)

    def leaves(node: dict, prefix: str = "") -> dict[str, object]:
        out: dict[str, object] = {}
        for key, value in node.items():
            if isinstance(value, dict) and value:
                out.update(leaves(value, f"{prefix}{key}."))
            else:
                out[prefix + key] = value
        return out

    return leaves(tree)


def default_drift(config_dir: Path, name: str) -> list[str]:
    """One line per key whose yaml default and dataclass default differ."""
    yaml_values, field_values = yaml_defaults(config_dir, name), field_defaults(CONFIG_CLASSES[name])
    return [
        f"{name}: {key} is {yaml_values[key]!r} in the yaml but {field_values[key]!r} in the dataclass"
        for key in sorted(set(yaml_values) & set(field_values))
        if yaml_values[key] != field_values[key]
    ]


@pytest.mark.parametrize("name", sorted(CONFIG_CLASSES))
def test_every_yaml_default_equals_the_dataclass_default(name):
    assert default_drift(gen.CONFIG_DIR, name) == []


def test_a_default_changed_on_one_side_only_is_reported(tmp_path):
    configs = tmp_path / "configs"
    shutil.copytree(gen.CONFIG_DIR, configs)
    _edit(configs / "ppo_trainer.yaml", r"(?<=^      lr: )2.0e-5$", "3.0e-5")
    _edit(configs / "rm_trainer.yaml", r"(?<=^  micro_batch_size_per_gpu: )4$", "8")
    assert default_drift(configs, "ppo_trainer") == [
        "ppo_trainer: actor_rollout_ref.actor.optim.lr is 3e-05 in the yaml but 2e-05 in the dataclass"
    ]
    assert default_drift(configs, "rm_trainer") == [
        "rm_trainer: data.micro_batch_size_per_gpu is 8 in the yaml but 4 in the dataclass"
    ]
