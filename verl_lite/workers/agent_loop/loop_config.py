"""Register agent loops named in a yaml file, in verl's ``agent_loop_config_path`` format.

    - name: answer_twice                               # the agent_name rows use
      _target_: my_pkg.loops.AnswerTwice               # an AgentLoop subclass

This is the file form of ``@register_agent_loop(name)``: the file is loaded, like ``trainer.extensions``,
in every process before its agent loops are looked up.
"""

from __future__ import annotations

import importlib

from verl_lite.workers.agent_loop.base import AGENT_LOOPS, AgentLoop


def register_agent_loops_from_yaml(path: str) -> list[str]:
    """Register each ``{name, _target_}`` entry of the yaml at ``path``; returns the names.

    Raises ``ValueError`` in one sentence naming the file, the entry and what is valid.
    """
    import yaml

    try:
        with open(path) as f:
            entries = yaml.safe_load(f)
    except (FileNotFoundError, IsADirectoryError):
        raise ValueError(
            f"agent loop config {path} is not a file; give a yaml list of {{name, _target_}}."
        ) from None
    if not isinstance(entries, list):
        raise ValueError(f"agent loop config {path} must be a yaml list of {{name, _target_}} entries.")
    names = []
    for index, entry in enumerate(entries):
        where = f"agent loop config {path}: entry {index}"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or "_target_" not in entry:
            raise ValueError(
                f"{where} needs a name and a _target_ (a dotted AgentLoop class path), got {entry!r}."
            )
        module_name, _, attr = str(entry["_target_"]).rpartition(".")
        try:
            cls = getattr(importlib.import_module(module_name), attr)
        except Exception as err:  # any way: a missing module or attribute, the module's own code
            raise ValueError(f"{where}: _target_ {entry['_target_']!r} cannot be imported ({err}).") from None
        if not (isinstance(cls, type) and issubclass(cls, AgentLoop)):
            raise ValueError(
                f"{where}: {entry['_target_']} is not an AgentLoop subclass (verl_lite's interface)."
            )
        AGENT_LOOPS.register(entry["name"])(cls)
        names.append(entry["name"])
    return names
