"""A tool, an interaction, an agent loop and a reward function as verl users write them (test_verl_plugins_on_cpu).

The classes follow verl's signatures and subclass nothing of verl_lite's (only ``ToolResponse`` is
imported from verl_lite, where a verl file imports verl's): the tool reads ``tool_schema.function.name``,
takes its ground truth from ``create_kwargs`` and returns verl's tuples; the interaction checks the
model's GSM8K answer and lets it try again.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from verl_lite.workers.agent_loop.tool_agent import ToolAgentLoop
from verl_lite.workers.tools import ToolResponse
from verl_lite.workers.tools.calculator import evaluate


class VerlStyleToolAgent(ToolAgentLoop):
    """The tool agent loop under a name declared only in an agent_loop_config_path yaml."""


class VerlStyleCalculator:
    """verl's BaseTool shape: create -> (id, ToolResponse), execute -> (ToolResponse, reward, metrics)."""

    def __init__(self, config: dict, tool_schema: Any):
        self.config, self.tool_schema = config, tool_schema
        self.name = tool_schema.function.name
        self._instances: dict[str, dict[str, Any]] = {}

    def get_openai_tool_schema(self) -> Any:
        return self.tool_schema

    async def create(self, instance_id: str | None = None, **kwargs) -> tuple[str, ToolResponse]:
        instance_id = instance_id or str(uuid.uuid4())
        ground_truth = kwargs.get("create_kwargs", {}).get("ground_truth")
        self._instances[instance_id] = {"ground_truth": str(ground_truth), "result": None}
        return instance_id, ToolResponse()

    async def execute(self, instance_id: str, parameters: dict, **kwargs) -> tuple[ToolResponse, float, dict]:
        result = evaluate(parameters["expression"])
        state = self._instances[instance_id]
        state["result"] = str(result)
        matched = float(state["result"] == state["ground_truth"])
        return ToolResponse(text=str(result)), 0.1 * matched, {"matched": matched}

    async def calc_reward(self, instance_id: str, **kwargs) -> float:
        state = self._instances[instance_id]
        return 1.0 if state["result"] == state["ground_truth"] else 0.0

    async def release(self, instance_id: str, **kwargs) -> None:
        del self._instances[instance_id]


class VerlStyleGsm8kInteraction:
    """verl's BaseInteraction shape: right answers end the episode with score 1, wrong ones ask again."""

    def __init__(self, config: dict):
        self.config, self.name = config, config.get("name", "interaction_agent")
        self._ground_truth: dict[str, str] = {}

    async def start_interaction(
        self, instance_id: str | None = None, ground_truth: str | None = None, **kwargs
    ):
        instance_id = instance_id or str(uuid.uuid4())
        self._ground_truth[instance_id] = str(ground_truth)
        return instance_id

    async def generate_response(self, instance_id: str, messages: list[dict], **kwargs):
        answer = next(m["content"] for m in reversed(messages) if m["role"] == "assistant")
        found = re.findall(r"####\s*(-?\d+)", answer)
        if found and found[-1] == self._ground_truth[instance_id]:
            return True, "Your response is correct!", 1.0, {}
        return False, "Your response is incorrect! You need to reflect on your answer and try again.", 0.0, {}

    async def calculate_score(self) -> float:
        return 0.0

    async def finalize_interaction(self, instance_id: str | None = None, **kwargs) -> None:
        del self._ground_truth[instance_id]


def interaction_score(data_source, solution_str, ground_truth, extra_info=None):
    """The interaction's last turn score is the reward; the tool's calc_reward is reported, not added."""
    turn_scores = (extra_info or {}).get("turn_scores") or [0.0]
    tool_reward = ((extra_info or {}).get("tool_rewards") or {}).get("calculator", 0.0)
    return {
        "score": float(turn_scores[-1]),
        "turns_scored": float(len(turn_scores)),
        "tool_reward_seen": tool_reward,
    }
