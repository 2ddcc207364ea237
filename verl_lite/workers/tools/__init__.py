"""Tools an agent loop can call: ``BaseTool``, the ``@tool`` decorator, a yaml tool list, tool-call parsers."""

from verl_lite.workers.tools.chat_template import TOOL_CHAT_TEMPLATE

__all__ = ["TOOL_CHAT_TEMPLATE"]
