"""The tool interface an agent loop calls, with verl's signatures, and reading what a tool returns.

``BaseTool`` has verl's contract (``verl.tools.base_tool.BaseTool``): ``create(instance_id, **kwargs) ->
(instance_id, ToolResponse)``, ``execute(instance_id, parameters, **kwargs) -> (ToolResponse, reward,
metrics)``, ``calc_reward``, ``release``, and a ``tool_schema`` read by attribute
(``tool_schema.function.name``) or by key. A tool class written against verl's ``BaseTool`` runs
unchanged; :func:`created_id` and :func:`call_result` are the one place that reads what a tool returned,
so a tool may also return a plain ``ToolResponse`` or a string.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass
class ToolResponse:
    """What one tool call shows the model, as verl's ``ToolResponse``: text, images, videos.

    verl_lite's prompts are text only: images and videos are not shown (and count in the
    ``tool_media_dropped`` metric).
    """

    text: str | None = None
    image: list[Any] | None = None
    video: list[Any] | None = None


class ToolSchema(dict):
    """An OpenAI function schema that also reads by attribute (``schema.function.name``), as verl's
    pydantic ``OpenAIFunctionToolSchema`` does; it is a dict, so chat templates render it as one."""

    def __getattr__(self, name: str) -> Any:
        try:
            value = self[name]
        except KeyError:
            raise AttributeError(name) from None
        return ToolSchema(value) if isinstance(value, dict) else value

    def model_dump(self, **_: Any) -> dict[str, Any]:
        """The plain dict (verl code calls pydantic's ``model_dump``)."""
        return dict(self)


class BaseTool(ABC):
    """A tool the model can call, with state kept per trajectory under an ``instance_id`` (verl's contract).

    The tool agent loop calls ``create(instance_id, create_kwargs=...)`` once per trajectory before the
    tool's first call there (the row's ``extra_info.tools_kwargs[name]["create_kwargs"]``, e.g. the ground
    truth), then ``execute`` per call, then ``calc_reward`` and ``release`` when the trajectory ends. One
    tool object serves many trajectories at once, so keep state keyed by instance id.

    As in verl, the reward of ``execute`` and ``calc_reward`` do not enter the score by themselves: they
    are logged (``tool_step_reward``, ``tool_reward``) and ``calc_reward`` reaches the reward function as
    ``extra_info["tool_rewards"][name]``, so a reward function already scoring the same answer does not
    count it twice.

    Args:
        config: the ``config`` mapping of the tool's yaml entry (tool-specific settings).
        tool_schema: OpenAI function schema ``{"type": "function", "function": {"name", "description",
            "parameters"}}``; None uses the class attribute ``tool_schema``.
    """

    tool_schema: ClassVar[Mapping[str, Any] | None] = None

    def __init__(self, config: Mapping[str, Any] | None = None, tool_schema: Mapping[str, Any] | None = None):
        self.config = dict(config or {})
        schema = tool_schema if tool_schema is not None else type(self).tool_schema
        if schema is None:
            raise ValueError(
                f"{type(self).__name__} has no tool_schema: pass one (the yaml entry's tool_schema) or set "
                "the class attribute tool_schema to an OpenAI function schema."
            )
        problem = schema_problem(schema)
        if problem:
            raise ValueError(f"{type(self).__name__}: {problem}")
        self.tool_schema = ToolSchema(schema)
        self.name: str = self.tool_schema.function.name

    def get_openai_tool_schema(self) -> ToolSchema:
        """The schema the model sees."""
        return self.tool_schema

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """Start the state of one trajectory; returns its instance id (no state by default)."""
        return instance_id or uuid.uuid4().hex, ToolResponse()

    @abstractmethod
    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float | None, dict[str, Any]]:
        """Run one call with the model's ``parameters``: what the model is shown, this call's reward
        (None for none) and scalars to log; raising shows the model an error result."""

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """The tool's reward for the finished trajectory (0.0 by default)."""
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Drop the state of one trajectory."""


def tool_name(tool: Any) -> str:
    """The name the model calls ``tool`` by (its schema's function name)."""
    schema = tool.tool_schema
    return schema["function"]["name"] if isinstance(schema, Mapping) else schema.function.name


def schema_dict(tool: Any) -> dict[str, Any]:
    """``tool``'s schema as a plain dict, for the chat template (verl's pydantic schema or a mapping)."""
    schema = tool.tool_schema
    if isinstance(schema, Mapping):
        return dict(schema)
    return schema.model_dump(exclude_unset=True, exclude_none=True)


def created_id(result: Any, requested: str) -> str:
    """The instance id a ``create`` call returned: verl's ``(id, response)``, an id, or None (``requested``)."""
    if isinstance(result, tuple):
        result = result[0]
    return requested if result is None else str(result)


@dataclass
class CallResult:
    """One ``execute`` result, read whatever its form."""

    text: str
    reward: float | None
    metrics: dict[str, float]
    # images / videos the response carried (not shown: verl_lite's prompts are text only)
    media: int


def call_result(result: Any) -> CallResult:
    """Read ``execute``'s value: verl's ``(ToolResponse, reward, metrics)``, a ``ToolResponse`` or a string."""
    reward, metrics = None, {}
    if isinstance(result, tuple):
        result, reward, metrics = (*result, None, None)[:3]
    if isinstance(result, str) or result is None:
        return CallResult(result or "", reward, dict(metrics or {}), 0)
    media = len(getattr(result, "image", None) or []) + len(getattr(result, "video", None) or [])
    return CallResult(getattr(result, "text", None) or "", reward, dict(metrics or {}), media)


def schema_problem(schema: Any) -> str:
    """One sentence saying why ``schema`` is not an OpenAI function schema, or "" when it is one."""
    if (
        not isinstance(schema, Mapping)
        or schema.get("type") != "function"
        or not isinstance(schema.get("function"), Mapping)
    ):
        return (
            f"tool_schema {schema!r} is not an OpenAI function schema "
            '{"type": "function", "function": {"name": ..., "description": ..., "parameters": {...}}}.'
        )
    function = schema["function"]
    if not isinstance(function.get("name"), str) or not function["name"]:
        return f"tool_schema.function needs a non-empty name string, got {function.get('name')!r}."
    parameters = function.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, Mapping) or parameters.get("type", "object") != "object":
        return f"tool_schema.function.parameters must be a JSON schema of type object, got {parameters!r}."
    return ""
