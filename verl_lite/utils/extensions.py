"""Load user extension files (custom losses, estimators, backends, trainer modes) in every process.

Registration happens at import time, so a file named in ``trainer.extensions`` is imported in the
driver (before validation), in the TaskRunner and in every worker process; workers find the list in
the ``VERL_LITE_EXTENSIONS`` environment variable that ``main_ppo`` hands to Ray.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable

ENV_VAR = "VERL_LITE_EXTENSIONS"


def load_extensions(entries: Iterable[str]) -> None:
    """Import each entry: a ``.py`` file path or a dotted module name (each only once per process).

    A file's module name carries a hash of its absolute path, so two files that share a name (say
    ``my_loss.py`` in two experiment folders) are both imported.
    """
    for entry in entries:
        if entry.endswith(".py"):
            path = os.path.abspath(os.path.expanduser(entry))
            if not os.path.exists(path):
                raise ValueError(f"trainer.extensions: file {entry!r} does not exist.")
            stem = os.path.splitext(os.path.basename(path))[0]
            name = f"verl_lite_extension_{stem}_{hashlib.sha1(path.encode()).hexdigest()[:10]}"
            if name in sys.modules:
                continue
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        else:
            importlib.import_module(entry)


def extensions_env(entries: Iterable[str]) -> dict[str, str]:
    """Environment entry that makes worker processes load the same extensions."""
    paths = [os.path.abspath(e) if e.endswith(".py") else e for e in entries]
    return {ENV_VAR: os.pathsep.join(paths)} if paths else {}


def load_extensions_from_env() -> None:
    """Import the extensions listed in ``VERL_LITE_EXTENSIONS`` (no-op when unset)."""
    value = os.environ.get(ENV_VAR)
    if value:
        load_extensions(value.split(os.pathsep))
