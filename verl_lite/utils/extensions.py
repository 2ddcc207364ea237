"""Load user extension files (custom losses, estimators, backends, trainer modes) in every process.

Registration happens at import time, so a file named in ``trainer.extensions`` is imported in the
driver (before validation), in the TaskRunner and in every worker process; workers find the list in
the ``VERL_LITE_EXTENSIONS`` environment variable that ``main_ppo`` hands to Ray. A ``.yaml`` entry is
an agent-loop file in verl's ``agent_loop_config_path`` format (``rollout.agent.agent_loop_config_path``
joins the list that way).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ENV_VAR = "VERL_LITE_EXTENSIONS"


def load_extensions(entries: Iterable[str]) -> None:
    """Import each entry: a ``.py`` file path or a dotted module name (each only once per process).

    A file's module name carries a hash of its absolute path, so two files that share a name (say
    ``my_loss.py`` in two experiment folders) are both imported.
    """
    for entry in entries:
        if entry.endswith((".yaml", ".yml")):
            from verl_lite.workers.agent_loop.loop_config import register_agent_loops_from_yaml

            register_agent_loops_from_yaml(os.path.expanduser(entry))
        elif entry.endswith(".py"):
            path = os.path.abspath(os.path.expanduser(entry))
            if not os.path.exists(path):
                raise ValueError(f"trainer.extensions: file {entry!r} does not exist.")
            name = private_module_name(path, "verl_lite_extension")
            if name in sys.modules:
                continue
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        else:
            importlib.import_module(entry)


def private_module_name(path: str | Path, prefix: str) -> str:
    """``<prefix>_<file stem>_<hash of the absolute path>``: files that share a name get different modules."""
    path = os.path.abspath(os.path.expanduser(str(path)))
    stem = os.path.splitext(os.path.basename(path))[0]
    return f"{prefix}_{stem}_{hashlib.sha1(path.encode()).hexdigest()[:10]}"


def function_from_file(path: str | Path, name: str, key: str) -> Callable[..., Any]:
    """The function ``name`` of the python file at ``path``; ``key`` (the config key) heads every error.

    The file runs as a private module that is registered only while it runs (dataclasses and typing
    look their module up there), so its functions pickle by value and can ship to Ray workers.

    Raises:
        FileNotFoundError: ``path`` is not a file.
        ValueError: the file is no python module, or defines no function ``name`` (the message lists
            the ones it has).
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"{key}: no such file {str(file)!r}; give the python file defining {name}.")
    spec = importlib.util.spec_from_file_location(private_module_name(file, "verl_lite_user"), file)
    if spec is None or spec.loader is None:
        raise ValueError(f"{key}: cannot import {str(file)!r} as a python module (is it a .py file?).")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    fn = getattr(module, name, None)
    if not callable(fn):
        defined = sorted(
            k
            for k, v in vars(module).items()
            if inspect.isfunction(v) and v.__module__ == spec.name and not k.startswith("_")
        )
        raise ValueError(
            f"{key}: {str(file)!r} has no function {name!r}; functions defined there: "
            f"{', '.join(defined) or '(none)'}."
        )
    return fn


def extensions_env(entries: Iterable[str]) -> dict[str, str]:
    """Environment entry that makes worker processes load the same extensions."""
    paths = [os.path.abspath(e) if e.endswith((".py", ".yaml", ".yml")) else e for e in entries]
    return {ENV_VAR: os.pathsep.join(paths)} if paths else {}


def load_extensions_from_env() -> None:
    """Import the extensions listed in ``VERL_LITE_EXTENSIONS`` (no-op when unset)."""
    value = os.environ.get(ENV_VAR)
    if value:
        load_extensions(value.split(os.pathsep))
