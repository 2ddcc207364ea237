"""Tools an agent loop can call: ``BaseTool``, the ``@tool`` decorator, a yaml tool list, tool-call parsers."""

from verl_lite.workers.tools.base import BaseTool, ToolResponse
from verl_lite.workers.tools.chat_template import TOOL_CHAT_TEMPLATE
from verl_lite.workers.tools.config import ToolConfigError, load_tools
from verl_lite.workers.tools.function_tool import FunctionTool, function_schema, tool
from verl_lite.workers.tools.parsers import (
    TOOL_PARSERS,
    ParsedToolCalls,
    ToolCall,
    ToolParser,
    get_tool_parser,
    register_tool_parser,
)

__all__ = [
    "TOOL_CHAT_TEMPLATE",
    "TOOL_PARSERS",
    "BaseTool",
    "FunctionTool",
    "ParsedToolCalls",
    "ToolCall",
    "ToolConfigError",
    "ToolParser",
    "ToolResponse",
    "function_schema",
    "get_tool_parser",
    "load_tools",
    "register_tool_parser",
    "tool",
]
