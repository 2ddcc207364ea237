"""Agents written against the OpenAI client, run by tests/workers/test_openai_endpoint_on_cpu.py."""

from __future__ import annotations

import asyncio
import json

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression exactly.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
    },
}


async def three_user_turns(client, row):
    """Three answers, a user message after each of the first two; the reward is the replies received."""
    messages = list(row["messages"])
    for turn in range(3):
        reply = await client.chat.completions.create(
            model="m", messages=messages, max_tokens=12, logprobs=True
        )
        message = reply.choices[0].message
        assert reply.choices[0].logprobs is None or len(reply.choices[0].logprobs.content) == (
            reply.usage.completion_tokens
        )
        messages += [{"role": "assistant", "content": message.content or ""}]
        messages += [{"role": "user", "content": f"And then? ({turn})"}]
    return 3.0


async def calls_calculator_greedily(client, row):
    """1.0 when a greedy answer comes back as an OpenAI tool call with JSON arguments, else 0.0."""
    messages = list(row["messages"])
    reply = await client.chat.completions.create(
        model="m", messages=messages, tools=[CALCULATOR], temperature=0.0
    )
    choice = reply.choices[0]
    calls = choice.message.tool_calls or []
    ok = choice.finish_reason == "tool_calls" and len(calls) == 1 and calls[0].function.name == "calculator"
    expression = json.loads(calls[0].function.arguments)["expression"] if ok else ""
    messages += [choice.message.model_dump(exclude_none=True)]
    messages += [{"role": "tool", "tool_call_id": calls[0].id if calls else "", "content": "2939"}]
    await client.chat.completions.create(model="m", messages=messages, tools=[CALCULATOR], temperature=0.0)
    return 1.0 if ok and "29" in expression and "73" in expression else 0.0


async def reflows_whitespace(client, row):
    """Sends the model's answer back with its whitespace changed, then asks again."""
    messages = list(row["messages"])
    reply = await client.chat.completions.create(model="m", messages=messages, max_tokens=16)
    content = reply.choices[0].message.content or ""
    reflowed = "  " + "\n\n".join(content.split(" ")) + " \n"
    messages += [{"role": "assistant", "content": reflowed}, {"role": "user", "content": "Sure?"}]
    await client.chat.completions.create(model="m", messages=messages, max_tokens=16)
    return None


async def with_sub_agent(client, row):
    """A main conversation, a sub-agent's own conversation in between, then the main one goes on."""
    messages = list(row["messages"])
    reply = await client.chat.completions.create(model="m", messages=messages, max_tokens=8)
    await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Summarise: apples."}], max_tokens=8
    )
    messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "More?"}]
    await client.chat.completions.create(model="m", messages=messages, max_tokens=8)
    return 1.0


async def raises_after_one_call(client, row):
    await client.chat.completions.create(model="m", messages=list(row["messages"]), max_tokens=8)
    raise RuntimeError("the agent's own bug")


async def hangs(client, row):
    await asyncio.sleep(3600)
