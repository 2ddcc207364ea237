"""``@tool``: make a typed python function (sync or async) a ``BaseTool`` whose schema comes from its signature.

    @tool
    def calculator(expression: str) -> str:
        \"\"\"Evaluate an arithmetic expression.

        Args:
            expression: e.g. "3 * (4 + 5)".
        \"\"\"

The schema's description is the docstring's first paragraph; each parameter's type comes from its
annotation (str, int, float, bool, list[...], dict, Literal[...], X | None) and its description from the
docstring's ``Args:`` section; parameters without a default are required. The decorated name stays
callable as the plain function.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from typing import Any

from verl_lite.workers.tools.base import BaseTool, ToolResponse
from verl_lite.workers.tools.threads import ToolThreads

_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array"}


class FunctionTool(BaseTool):
    """A ``BaseTool`` that calls one python function with the model's arguments (stateless)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        config: dict[str, Any] | None = None,
        tool_schema: dict[str, Any] | None = None,
    ):
        self.fn = fn
        super().__init__(config, tool_schema if tool_schema is not None else function_schema(fn))
        self._signature = inspect.signature(fn)
        # a sync function runs on threads of this tool only (see threads.py: a hung call keeps its thread)
        self._threads = ToolThreads(self.name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"FunctionTool({self.fn.__module__}.{self.fn.__qualname__})"

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float | None, dict[str, Any]]:
        """Call the function (a sync one on this tool's own threads); its value becomes the response text
        (no reward, no metrics)."""
        try:
            bound = self._signature.bind(**parameters)
        except TypeError as err:
            valid = ", ".join(self._signature.parameters) or "none"
            raise TypeError(f"{self.name}: {err} (its parameters: {valid}).") from None
        if inspect.iscoroutinefunction(self.fn):
            value = await self.fn(*bound.args, **bound.kwargs)
        else:
            value = await self._threads.run(self.fn, *bound.args, **bound.kwargs)
        if not isinstance(value, ToolResponse):
            value = ToolResponse(text=value if isinstance(value, str) else json.dumps(value))
        return value, None, {}


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None):
    """Decorator: ``@tool`` or ``@tool(name=..., description=...)`` turns ``fn`` into a ``FunctionTool``."""

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        schema = function_schema(f)
        if name is not None:
            schema["function"]["name"] = name
        if description is not None:
            schema["function"]["description"] = description
        return FunctionTool(f, tool_schema=schema)

    return wrap(fn) if fn is not None else wrap


def function_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """The OpenAI function schema of ``fn`` from its signature, annotations and docstring."""
    hints = typing.get_type_hints(fn)
    summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
    properties, required = {}, []
    for pname, param in inspect.signature(fn).parameters.items():
        where = f"@tool {fn.__qualname__}: parameter {pname!r}"
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"{where} is *args/**kwargs; a tool takes named, typed parameters only.")
        if pname not in hints:
            raise TypeError(
                f"{where} has no type annotation; annotate it (str, int, float, bool, list, dict)."
            )
        prop = _json_schema(hints[pname], where)
        if pname in arg_docs:
            prop["description"] = arg_docs[pname]
        properties[pname] = prop
        if param.default is param.empty:
            required.append(pname)
    return {
        "type": "function",
        "function": {
            "name": fn.__name__,
            "description": summary,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


def _json_schema(hint: Any, where: str) -> dict[str, Any]:
    """JSON schema of one annotation."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _json_schema(inner[0], where)
    elif origin is typing.Literal:
        return {"type": _JSON_TYPES.get(type(args[0]), "string"), "enum": list(args)}
    elif origin in (list, tuple, set):
        schema = {"type": "array"}
        if args and args[0] is not Ellipsis:
            schema["items"] = _json_schema(args[0], where)
        return schema
    elif origin is dict:
        return {"type": "object"}
    elif hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    raise TypeError(
        f"{where} has type {hint!r}, which has no JSON schema here; use str, int, float, bool, "
        "list[...], dict, Literal[...] or X | None."
    )


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(first paragraph, {parameter: description}) of a Google-style docstring."""
    summary = doc.split("\n\n", 1)[0].strip().replace("\n", " ")
    arg_docs: dict[str, str] = {}
    section = re.search(r"^(?:Args|Arguments|Parameters):\s*\n((?:[ \t]+.*\n?|\s*\n)*)", doc, re.MULTILINE)
    if section:
        current, indent = None, None
        for line in section.group(1).splitlines():
            stripped = line.lstrip()
            depth = len(line) - len(stripped)
            m = re.match(r"(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", stripped)
            if m and (indent is None or depth <= indent):
                current, indent = m.group(1), depth
                arg_docs[current] = m.group(2).strip()
            elif current and stripped:
                arg_docs[current] = f"{arg_docs[current]} {stripped}".strip()
    return summary, arg_docs
