"""The interaction interface, with verl's signatures: a user simulator or environment that answers the model.

In a multi-turn rollout, when the model's turn calls no tool, the tool agent loop hands the turn to the
row's interaction (``extra_info.interaction_kwargs.name``). Its answer is shown to the model as a user
message (observation tokens, mask 0); it may end the episode, and each answer carries a score.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from typing import Any


class BaseInteraction(ABC):
    """verl's ``BaseInteraction``: one object serves many episodes at once, keyed by ``instance_id``.

    Args:
        config: the ``config`` mapping of the interaction's yaml entry, with its ``name`` added.
    """

    def __init__(self, config: dict[str, Any]):
        self.config = config
        self.name: str = config.get("name", "interaction_agent")

    async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
        """Start one episode with the row's ``interaction_kwargs``; returns its instance id."""
        return instance_id or uuid.uuid4().hex

    @abstractmethod
    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        """Answer the conversation so far: (should_terminate, response text, this turn's score, metrics)."""

    async def calculate_score(self, instance_id: str | None = None, **kwargs: Any) -> float:
        """The episode's score (0.0 by default)."""
        return 0.0

    async def finalize_interaction(self, instance_id: str | None = None, **kwargs: Any) -> None:
        """Drop the state of one episode."""
