"""Interactions (verl's ``BaseInteraction``): answer the model between its turns, score, end episodes."""

from verl_lite.workers.interactions.base import BaseInteraction
from verl_lite.workers.interactions.config import InteractionConfigError, load_interactions

__all__ = ["BaseInteraction", "InteractionConfigError", "load_interactions"]
