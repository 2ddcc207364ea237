"""The calculator task as a plain OpenAI-SDK agent: tools in OpenAI's format, the loop written by hand.

Trained by ``python -m verl_lite.main_ppo --config-name openai_agent_tiny``; the same code runs against any
OpenAI-compatible server. It returns None, so the configured reward manager (``synthetic_calc``) scores
the final answer.
"""

from __future__ import annotations

import json

from verl_lite.workers.tools.calculator import evaluate, format_number

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression exactly.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": 'e.g. "(12 + 7) * 3"'}},
            "required": ["expression"],
        },
    },
}
# Model turns: a call, its result, the answer, and one more try.
MAX_TURNS = 3


def run_calculator(arguments: str) -> str:
    """The calculator's result for a call's JSON arguments, or the error the model should see."""
    try:
        return format_number(evaluate(json.loads(arguments)["expression"]))
    except Exception as err:  # the model sees what went wrong, as a tool result
        return f"Error: {type(err).__name__}: {err}"


async def agent(client, row: dict) -> float | None:
    """Answer the row's question, calling the calculator whenever the model asks for it."""
    messages = list(row["messages"])
    for _ in range(MAX_TURNS):
        reply = await client.chat.completions.create(model="policy", messages=messages, tools=[CALCULATOR])
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": run_calculator(call.function.arguments)}
            )
    return None
