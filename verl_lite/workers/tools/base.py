"""The tool interface an agent loop calls: per-trajectory instances, one call's result, and a final reward."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass
class ToolResponse:
    """The result of one tool call."""

    # What the model is shown (before truncation to multi_turn.max_tool_response_length).
    text: str = ""
    # Optional reward of this one call (summed into the trajectory's tool_step_reward metric).
    reward: float | None = None
    # Scalars the tool wants logged (averaged over calls by the agent loop, prefixed with the tool name).
    metrics: dict[str, float] = field(default_factory=dict)


class BaseTool(ABC):
    """A tool the model can call, with state kept per trajectory under an ``instance_id``.

    The agent loop calls ``create`` once per trajectory before the tool's first call there (with the row's
    ``tools_kwargs[name]["create_kwargs"]``, e.g. the ground truth), then ``execute`` per call,
    ``calc_reward`` once when the trajectory ends (summed into ``AgentLoopOutput.tool_rewards``) and
    ``release``. One tool object serves many trajectories at once, so keep state keyed by instance id.

    Args:
        config: the ``config`` mapping of the tool's yaml entry (tool-specific settings).
        tool_schema: OpenAI function schema ``{"type": "function", "function": {"name", "description",
            "parameters"}}``; None uses the class attribute ``tool_schema``.
    """

    tool_schema: ClassVar[dict[str, Any] | None] = None

    def __init__(self, config: dict[str, Any] | None = None, tool_schema: dict[str, Any] | None = None):
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
        self.tool_schema = schema

    @property
    def name(self) -> str:
        """The name the model calls this tool by."""
        return self.tool_schema["function"]["name"]

    async def create(self, instance_id: str, **kwargs: Any) -> None:
        """Start the state of one trajectory (no state by default)."""

    @abstractmethod
    async def execute(self, instance_id: str, parameters: dict[str, Any]) -> ToolResponse:
        """Run one call with the model's ``parameters``; raising shows the model an error result."""

    async def calc_reward(self, instance_id: str) -> float:
        """The tool's reward for the finished trajectory (0.0 by default)."""
        return 0.0

    async def release(self, instance_id: str) -> None:
        """Drop the state of one trajectory."""


def schema_problem(schema: Any) -> str:
    """One sentence saying why ``schema`` is not an OpenAI function schema, or "" when it is one."""
    if (
        not isinstance(schema, dict)
        or schema.get("type") != "function"
        or not isinstance(schema.get("function"), dict)
    ):
        return (
            f"tool_schema {schema!r} is not an OpenAI function schema "
            '{"type": "function", "function": {"name": ..., "description": ..., "parameters": {...}}}.'
        )
    function = schema["function"]
    if not isinstance(function.get("name"), str) or not function["name"]:
        return f"tool_schema.function needs a non-empty name string, got {function.get('name')!r}."
    parameters = function.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
        return f"tool_schema.function.parameters must be a JSON schema of type object, got {parameters!r}."
    return ""
