"""A GSM8K-style interaction: the model answers, the interaction says whether it is right and lets it retry.

Rows name it with ``extra_info.interaction_kwargs = {"name": "gsm8k", "ground_truth": "72"}``. An answer
is read as verl's GSM8K scorer reads it (the number after the last ``####``). A right answer ends the
episode with score 1.0; a wrong one scores 0.0 and the model is asked to try again (until
``multi_turn.max_user_turns`` ends the episode). Config: ``{name: gsm8k}`` in the interaction yaml
(``verl_lite/configs/interactions/gsm8k.yaml``).
"""

from __future__ import annotations

import re
from typing import Any

from verl_lite.workers.interactions.base import BaseInteraction

_ANSWER = re.compile(r"####\s*(-?[\d.,]+)")


def gsm8k_answer(text: str) -> str | None:
    """The number after the last ``####`` of ``text`` (commas dropped), or None."""
    found = _ANSWER.findall(text)
    return found[-1].replace(",", "").rstrip(".") if found else None


class Gsm8kInteraction(BaseInteraction):
    """Checks the model's latest answer against the episode's ground truth (see the module docstring)."""

    def __init__(self, config: dict[str, Any]):
        super().__init__(config)
        self._episodes: dict[str, dict[str, Any]] = {}

    async def start_interaction(
        self, instance_id: str | None = None, ground_truth: str | None = None, **kwargs: Any
    ) -> str:
        """Remember the episode's ground truth."""
        instance_id = await super().start_interaction(instance_id)
        self._episodes[instance_id] = {"ground_truth": str(ground_truth), "score": 0.0}
        return instance_id

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        """Score the last assistant message: right ends the episode, wrong asks for another try."""
        answer = next(
            (m.get("content") or "" for m in reversed(messages) if m.get("role") == "assistant"), ""
        )
        score = await self.calculate_score(instance_id, answer=answer)
        if score == 1.0:
            return True, "Your answer is correct.", score, {}
        return False, "Your answer is wrong. Please check your work and try again.", score, {}

    async def calculate_score(self, instance_id: str | None = None, answer: str = "", **kwargs: Any) -> float:
        """1.0 when ``answer``'s final number is the ground truth, else 0.0 (kept as the episode's score)."""
        episode = self._episodes[instance_id]
        episode["score"] = 1.0 if gsm8k_answer(answer) == episode["ground_truth"] else 0.0
        return episode["score"]

    async def finalize_interaction(self, instance_id: str | None = None, **kwargs: Any) -> None:
        """Forget the episode."""
        self._episodes.pop(instance_id, None)
