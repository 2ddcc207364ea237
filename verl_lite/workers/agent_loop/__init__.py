"""Agent loops: one trajectory per prompt row, talking to a rollout server (``single_turn``, ``tool_agent``,
``openai_agent``, ``openenv``)."""

from verl_lite.workers.agent_loop.base import (
    AGENT_LOOPS,
    AgentLoop,
    AgentLoopContext,
    AgentLoopOutput,
    ServerClient,
    get_agent_loop,
    register_agent_loop,
)
from verl_lite.workers.agent_loop.openai_agent import OpenAIAgentLoop
from verl_lite.workers.agent_loop.openenv_agent import OpenEnvAgentLoop
from verl_lite.workers.agent_loop.single_turn import SingleTurnAgentLoop
from verl_lite.workers.agent_loop.tool_agent import ToolAgentLoop, truncate_tool_response
from verl_lite.workers.turns import TurnRecord

__all__ = [
    "AGENT_LOOPS",
    "AgentLoop",
    "AgentLoopContext",
    "AgentLoopOutput",
    "OpenAIAgentLoop",
    "OpenEnvAgentLoop",
    "ServerClient",
    "SingleTurnAgentLoop",
    "ToolAgentLoop",
    "TurnRecord",
    "get_agent_loop",
    "register_agent_loop",
    "truncate_tool_response",
]
