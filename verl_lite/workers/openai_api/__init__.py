"""An OpenAI-compatible chat-completions endpoint in front of the rollout servers, recording token-exact
trajectories (``openai_agent`` agent loop; docs/openai_agents.md)."""

from verl_lite.workers.openai_api.endpoint import OpenAIEndpoint, endpoint_on_this_loop
from verl_lite.workers.openai_api.schema import ChatRequest, RequestError, parse_chat_request
from verl_lite.workers.openai_api.session import MODEL_ID, ChatSession
from verl_lite.workers.openai_api.transcript import Segment, Transcript

__all__ = [
    "MODEL_ID",
    "ChatRequest",
    "ChatSession",
    "OpenAIEndpoint",
    "RequestError",
    "Segment",
    "Transcript",
    "endpoint_on_this_loop",
    "parse_chat_request",
]
