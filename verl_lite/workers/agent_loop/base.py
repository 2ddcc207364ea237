"""The agent-loop interface: one trajectory from one prompt row, talking to a rollout server client.

An ``AgentLoop`` turns a dataset row into a trajectory (prompt ids, response ids with a mask of which tokens
the model generated, rollout log-probs). The agent-loop manager runs many loops at once on one asyncio loop
and gives each a ``ServerClient`` kept on one rollout server for the whole trajectory (its prefix cache).
Loops register by name; a row's ``agent_name`` (or ``rollout.agent.default_agent_loop``) picks one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Protocol

from verl_lite.utils.registry import Registry
from verl_lite.workers.config import RolloutConfig, SamplingConfig
from verl_lite.workers.rollout.server import TokenOutput
from verl_lite.workers.tools.base import BaseTool, schema_dict
from verl_lite.workers.turns import AgentLoopOutput


class ServerClient(Protocol):
    """What an agent loop sees of the rollout: one generation per call, many calls at once."""

    async def generate(self, prompt_ids: list[int], sampling: SamplingConfig, max_tokens: int) -> TokenOutput:
        """Sample at most ``max_tokens`` ids continuing ``prompt_ids`` (one sample; ``sampling.n`` ignored)."""
        ...


@dataclass
class AgentLoopContext:
    """What every loop of one rollout worker shares: tokenizer, rollout config, tools."""

    # A Hugging Face tokenizer (apply_chat_template, decode, eos_token_id).
    tokenizer: Any
    config: RolloutConfig = field(default_factory=RolloutConfig)
    # Tools by the name the model calls them (from multi_turn.tool_config_path): BaseTool objects, or
    # objects of classes written against verl's BaseTool.
    tools: dict[str, BaseTool] = field(default_factory=dict)
    # Chat template used instead of the tokenizer's own (None = the tokenizer's).
    chat_template: str | None = None
    # Interactions by name (from multi_turn.interaction_config_path; verl's BaseInteraction).
    interactions: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_config(cls, tokenizer: Any, config: RolloutConfig, chat_template: str | None = None):
        """A context whose tools and interactions are loaded from ``config.multi_turn``'s yaml files."""
        from verl_lite.workers.interactions import load_interactions
        from verl_lite.workers.tools.config import load_tools

        tools, interactions = config.multi_turn.tool_config_path, config.multi_turn.interaction_config_path
        return cls(
            tokenizer,
            config,
            load_tools(tools) if tools else {},
            chat_template,
            load_interactions(interactions) if interactions else {},
        )

    def tool_schemas(self) -> list[dict[str, Any]] | None:
        """OpenAI function schemas of the tools, for ``apply_chat_template(tools=...)`` (None without tools)."""
        return [schema_dict(t) for t in self.tools.values()] or None


class AgentLoop(ABC):
    """Produces one trajectory per ``run``; a subclass registers itself with ``@register_agent_loop(name)``.

    One instance may serve many concurrent ``run`` calls: keep per-trajectory state in locals.
    """

    def __init__(self, context: AgentLoopContext):
        self.context = context
        self.tokenizer = context.tokenizer
        self.config = context.config

    @abstractmethod
    async def run(
        self, row: dict[str, Any], client: ServerClient, sampling: SamplingConfig, max_tokens: int
    ) -> AgentLoopOutput:
        """One trajectory of at most ``max_tokens`` response tokens for ``row``.

        Args:
            row: ``prompt_ids`` (list[int], templated without tools), optional ``messages`` (the chat list),
                ``data_source``, ``ground_truth``, ``extra_info``, optional ``tools_kwargs``
                ({tool name: {"create_kwargs": {...}}}).
            client: the rollout server this trajectory talks to.
            sampling: sampling parameters of every generation.
            max_tokens: response budget (model and observation tokens together).
        """


AGENT_LOOPS: Registry[type[AgentLoop]] = Registry("agent_loop")
register_agent_loop = AGENT_LOOPS.register
# verl's names of the loops verl_lite has under its own names (verl's data files carry them in agent_name).
VERL_AGENT_NAMES = {"single_turn_agent": "single_turn"}


def agent_loop_name(name: str) -> str:
    """The registered name an ``agent_name`` value means (verl's names mapped, any other kept)."""
    return VERL_AGENT_NAMES.get(name, name)


def get_agent_loop(name: str) -> type[AgentLoop]:
    """The agent loop registered as ``name`` or, for verl's names, as verl_lite's equivalent."""
    return AGENT_LOOPS.get(agent_loop_name(name))
