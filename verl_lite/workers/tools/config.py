"""Load a yaml tool list in verl's format into tool objects, with one-sentence errors naming the entry.

    tools:
      - class_name: verl_lite.workers.tools.calculator.calculator   # a @tool function ...
      - class_name: my_pkg.search.SearchTool                        # ... or a BaseTool subclass
        config: {top_k: 3}                                          # passed to the class
        tool_schema: {type: function, function: {name: search, description: ..., parameters: {...}}}

A tool class is built as ``Class(config=config, tool_schema=tool_schema)``, with the schema readable by
attribute as verl's is: a ``BaseTool`` subclass, or a class written against verl's own ``BaseTool`` (any
class with an ``execute`` method). A ``@tool`` function keeps the schema of its signature unless the
entry gives one.
"""

from __future__ import annotations

import importlib
from typing import Any

from verl_lite.workers.tools.base import BaseTool, ToolSchema, schema_problem, tool_name
from verl_lite.workers.tools.function_tool import FunctionTool

_ENTRY_KEYS = ("class_name", "config", "tool_schema")


class ToolConfigError(ValueError):
    """A tool yaml that cannot be loaded; the message names the file, the entry and what is valid."""


def load_tools(path: str) -> dict[str, Any]:
    """The tools of the yaml file at ``path``, by the name the model calls them."""
    import yaml

    try:
        with open(path) as f:
            tree = yaml.safe_load(f)
    except FileNotFoundError:
        raise ToolConfigError(
            f"tool config {path} does not exist; set multi_turn.tool_config_path to a yaml file."
        ) from None
    except IsADirectoryError:
        raise ToolConfigError(
            f"tool config {path} is a folder; set multi_turn.tool_config_path to a yaml file."
        ) from None
    except yaml.YAMLError as err:
        raise ToolConfigError(f"tool config {path} is not valid yaml: {str(err).splitlines()[0]}") from None
    entries = tree.get("tools") if isinstance(tree, dict) else None
    if not isinstance(entries, list):
        raise ToolConfigError(
            f"tool config {path} must hold a top-level 'tools' list of {{class_name, config, tool_schema}} "
            f"entries, got {type(tree).__name__ if not isinstance(tree, dict) else 'no tools list'}."
        )
    tools: dict[str, BaseTool] = {}
    for index, entry in enumerate(entries):
        where = f"tool config {path}: tools[{index}]"
        built = _build(entry, where)
        name = tool_name(built)
        if name in tools:
            raise ToolConfigError(f"{where} is a second tool named {name!r}; tool names must be unique.")
        tools[name] = built
    return tools


def _build(entry: Any, where: str) -> Any:
    if not isinstance(entry, dict) or not isinstance(entry.get("class_name"), str):
        raise ToolConfigError(f'{where} needs a class_name string ("pkg.module.Class"), got {entry!r}.')
    unknown = sorted(set(entry) - set(_ENTRY_KEYS))
    if unknown:
        raise ToolConfigError(f"{where} has unknown keys {unknown}; valid keys: {', '.join(_ENTRY_KEYS)}.")
    class_name, config = entry["class_name"], entry.get("config") or {}
    schema = entry.get("tool_schema")
    if not isinstance(config, dict):
        raise ToolConfigError(f"{where}.config must be a mapping, got {config!r}.")
    if schema is not None and schema_problem(schema):
        raise ToolConfigError(f"{where}: {schema_problem(schema)}")
    target = _import(class_name, where)
    if isinstance(target, FunctionTool):
        return FunctionTool(target.fn, config=config, tool_schema=schema or target.tool_schema)
    if isinstance(target, type) and (
        issubclass(target, BaseTool) or callable(getattr(target, "execute", None))
    ):
        if schema is None and getattr(target, "tool_schema", None) is None:
            raise ToolConfigError(f"{where} ({class_name}) needs a tool_schema: the class defines none.")
        try:
            return target(config=config, tool_schema=None if schema is None else ToolSchema(schema))
        except Exception as err:
            raise ToolConfigError(f"{where}: {class_name}(config={config!r}) failed: {err}") from err
    raise ToolConfigError(
        f"{where}: {class_name} is a {type(target).__name__}, not a tool class (a BaseTool with verl's "
        "execute) or a @tool function."
    )


def _import(class_name: str, where: str) -> Any:
    module_name, _, attr = class_name.rpartition(".")
    if not module_name:
        raise ToolConfigError(
            f'{where}: class_name {class_name!r} must be a dotted path, "pkg.module.Class".'
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # any way: syntax, a missing package, the module's own code
        raise ToolConfigError(
            f"{where}: class_name {class_name!r} cannot be imported ({_import_failure(err)})."
        ) from None
    if not hasattr(module, attr):
        raise ToolConfigError(f"{where}: module {module_name} has no {attr!r} (class_name {class_name!r}).")
    return getattr(module, attr)


def _import_failure(err: Exception) -> str:
    """What went wrong importing a tool module: the file and line of a syntax error, else the exception."""
    if isinstance(err, SyntaxError):
        return f"SyntaxError in {err.filename} line {err.lineno}: {err.msg}"
    if isinstance(err, ImportError):
        return str(err)
    return f"{type(err).__name__} while running the module: {err}"
