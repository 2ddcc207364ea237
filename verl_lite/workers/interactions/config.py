"""Load a yaml interaction list in verl's format, with one-sentence errors naming the entry.

interaction:
  - name: gsm8k                                                   # rows pick it by interaction_kwargs.name
    class_name: verl_lite.workers.interactions.gsm8k.Gsm8kInteraction
    config: {}                                                    # passed to the class, with name added
"""

from __future__ import annotations

import importlib
from typing import Any


class InteractionConfigError(ValueError):
    """An interaction yaml that cannot be loaded; the message names the file, the entry and what is valid."""


def load_interactions(path: str) -> dict[str, Any]:
    """The interactions of the yaml file at ``path``, by name (classes written against verl's
    ``BaseInteraction``, or verl_lite's, which has the same methods)."""
    import yaml

    try:
        with open(path) as f:
            tree = yaml.safe_load(f)
    except (FileNotFoundError, IsADirectoryError):
        raise InteractionConfigError(
            f"interaction config {path} is not a file; set multi_turn.interaction_config_path to a yaml file."
        ) from None
    entries = tree.get("interaction") if isinstance(tree, dict) else None
    if not isinstance(entries, list):
        raise InteractionConfigError(
            f"interaction config {path} must hold a top-level 'interaction' list of {{name, class_name, config}} "
            "entries."
        )
    interactions: dict[str, Any] = {}
    for index, entry in enumerate(entries):
        where = f"interaction config {path}: interaction[{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("class_name"), str):
            raise InteractionConfigError(
                f'{where} needs a class_name string ("pkg.module.Class"), got {entry!r}.'
            )
        cls = _import(entry["class_name"], where)
        config = dict(entry.get("config") or {})
        name = entry.get("name") or config.get("name") or "interaction_agent"
        if name in interactions:
            raise InteractionConfigError(
                f"{where} is a second interaction named {name!r}; names must be unique."
            )
        try:
            interactions[name] = cls({**config, "name": name})
        except Exception as err:
            raise InteractionConfigError(f"{where}: {entry['class_name']}({config!r}) failed: {err}") from err
    return interactions


def _import(class_name: str, where: str) -> Any:
    module_name, _, attr = class_name.rpartition(".")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except Exception as err:  # any way: a missing module or attribute, the module's own code
        raise InteractionConfigError(
            f"{where}: class_name {class_name!r} cannot be imported ({type(err).__name__}: {err})."
        ) from None
    if not (isinstance(target, type) and callable(getattr(target, "generate_response", None))):
        raise InteractionConfigError(
            f"{where}: {class_name} is not an interaction class (one with generate_response)."
        )
    return target
