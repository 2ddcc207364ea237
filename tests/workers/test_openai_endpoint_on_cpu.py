"""The OpenAI-compatible endpoint and the ``openai_agent`` loop, driven by the real ``openai`` client.

One real hf rollout server on the embedded agent model (its tokenizer carries the tools-capable chat
template) serves every test; the agents are plain OpenAI-SDK coroutines run by ``OpenAIAgentLoop`` on the
server's loop, as in the hybrid placement. ``RecordingClient`` keeps what the server was sent and what it
sampled, so the stored trajectory is checked against the server's own ids.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest

from verl_lite.workers.agent_loop import AgentLoopContext
from verl_lite.workers.agent_loop.openai_agent import OpenAIAgentLoop, load_agent
from verl_lite.workers.agent_loop.servers import LeastLoadedServers, StickyClient
from verl_lite.workers.config import (
    AgentConfig,
    AgentFunction,
    MultiTurnConfig,
    OpenAIAgentConfig,
    RolloutConfig,
    SamplingConfig,
)
from verl_lite.workers.openai_api import endpoint_on_this_loop
from verl_lite.workers.rollout import ServerHost, get_rollout
from verl_lite.workers.rollout.client import InProcessClient

AGENT_MODEL = str(Path(__file__).resolve().parents[2] / "verl_lite" / "assets" / "tiny_agent_model")
AGENTS = Path(__file__).resolve().parent / "openai_agents.py"
CALCULATOR_AGENT = (
    Path(__file__).resolve().parents[2] / "verl_lite" / "configs" / "agents" / "calculator_openai.py"
)
SAMPLED = SamplingConfig(n=1, temperature=1.0)
GREEDY = SamplingConfig(n=1, temperature=0.0, do_sample=False)
QUESTION = "Ben has 29 bags of 73 apples. He buys 822 more. How many apples does Ben have now?"


class RecordingClient:
    """The trajectory's real sticky client, keeping every request's prompt ids and sampled ids."""

    def __init__(self, host: ServerHost, prefix: str):
        self.sticky = StickyClient(LeastLoadedServers([InProcessClient(host.server)]), prefix)
        self.requests: list[tuple[list[int], list[int]]] = []

    async def generate(self, prompt_ids, sampling, max_tokens):
        out = await self.sticky.generate(prompt_ids, sampling, max_tokens)
        self.requests.append((list(prompt_ids), list(out.token_ids)))
        return out


@pytest.fixture(scope="module")
def host():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(AGENT_MODEL)
    host = ServerHost(
        lambda: get_rollout("hf")(
            AGENT_MODEL, RolloutConfig(max_num_seqs=16), tok.eos_token_id, tok.pad_token_id
        )
    )
    host.tokenizer = tok
    yield host
    host.shutdown()


def run_agent(host, name: str, *, path=AGENTS, timeout_s=60.0, budget=200, sampling=SAMPLED, **multi_turn):
    """``OpenAIAgentLoop`` running agent ``name`` of ``path`` once on the calculator question."""
    config = RolloutConfig(
        prompt_length=96,
        multi_turn=MultiTurnConfig(**multi_turn),
        agent=AgentConfig(openai=OpenAIAgentConfig(AgentFunction(str(path), name), timeout_s)),
    )
    loop = OpenAIAgentLoop(AgentLoopContext(host.tokenizer, config))
    client = RecordingClient(host, f"t-{name}")
    row = {"prompt_ids": [1], "messages": [{"role": "user", "content": QUESTION}], "extra_info": {}}
    output = host.call(loop.run(row, client, sampling, budget), timeout=120)
    return output, client


def assert_token_exact(output, client, *, requests_in_segment: int):
    """The stored trajectory is the last request's prompt + its sampled ids, masked 1 exactly on those ids
    and on the sampled ids of the segment's earlier requests (each found where the server was sent it)."""
    requests = client.requests[-requests_in_segment:]
    last_prompt, last_sampled = requests[-1]
    assert output.prompt_ids + output.response_ids == last_prompt + last_sampled
    expected = [0] * (len(last_prompt) + len(last_sampled) - len(output.prompt_ids))
    for prompt, sampled in requests:
        start = len(prompt) - len(output.prompt_ids)
        # the server received the earlier turns exactly as stored: no sampled id was re-tokenized
        assert (output.prompt_ids + output.response_ids)[: len(prompt)] == prompt
        expected[start : start + len(sampled)] = [1] * len(sampled)
    assert output.response_mask == expected
    assert sum(1 for p in output.response_log_probs if p != 0.0) <= sum(expected)


def test_several_user_turns_without_tools_are_one_token_exact_segment(host):
    output, client = run_agent(host, "three_user_turns")
    assert len(client.requests) == 3
    assert output.metrics["openai_segments"] == 1 and output.metrics["openai_requests"] == 3
    assert output.num_turns == 3 + 2  # three answers, two user messages appended
    assert_token_exact(output, client, requests_in_segment=3)
    assert output.reward == 3.0  # the agent's own reward: the number of replies it got


def test_tool_calls_come_back_as_openai_tool_calls_and_results_extend_the_segment(host):
    # the shipped example agent, greedy (as in validation): the SFT'd model calls the calculator on a
    # product, the agent runs it and sends the result back as a role "tool" message, the model answers
    output, client = run_agent(
        host, "agent", path=CALCULATOR_AGENT, sampling=GREEDY, max_assistant_turns=3, max_user_turns=2
    )
    assert len(client.requests) == 2 and output.metrics["openai_segments"] == 1
    assert_token_exact(output, client, requests_in_segment=2)
    text = host.tokenizer.decode(output.response_ids)
    assert "<tool_response>2939</tool_response>" in text  # the template's rendering of the tool message


def test_openai_client_sees_tool_calls_in_openai_format(host):
    output, client = run_agent(host, "calls_calculator_greedily")
    assert output.reward == 1.0  # the agent checked message.tool_calls and the arguments' JSON itself
    assert_token_exact(output, client, requests_in_segment=len(client.requests))


def test_model_text_sent_back_with_other_whitespace_still_extends_the_segment(host):
    output, client = run_agent(host, "reflows_whitespace")
    assert len(client.requests) == 2 and output.metrics["openai_segments"] == 1
    assert_token_exact(output, client, requests_in_segment=2)


def test_a_sub_agent_conversation_starts_a_new_segment_and_the_last_one_is_trained(host):
    output, client = run_agent(host, "with_sub_agent")
    assert len(client.requests) == 3 and output.metrics["openai_segments"] == 2
    # main turn 1, sub-agent turn, main turn 2: the trained segment is the main conversation
    main = [client.requests[0], client.requests[2]]
    assert output.prompt_ids + output.response_ids == main[1][0] + main[1][1]
    assert main[1][0][: len(main[0][0]) + len(main[0][1])] == main[0][0] + main[0][1]
    sub_prompt = client.requests[1][0]
    assert sub_prompt[: len(output.prompt_ids)] != output.prompt_ids or len(sub_prompt) != len(main[0][0])


def test_a_raising_agent_is_a_counted_failure_with_reward_zero(host):
    output, _ = run_agent(host, "raises_after_one_call")
    assert output.metrics["agent_errors"] == 1 and output.reward == 0.0
    assert sum(output.response_mask) > 0  # the tokens of its one request are kept


def test_a_hanging_agent_times_out_as_a_counted_failure(host):
    output, _ = run_agent(host, "hangs", timeout_s=1.0)
    assert output.metrics["agent_timeouts"] == 1 and output.reward == 0.0
    assert output.response_mask == [0] and output.response_ids == [host.tokenizer.eos_token_id]


def test_turn_limit_answers_with_length_and_no_tokens(host):
    # one answer allowed: the 2nd and 3rd requests extend the segment and get empty "length" replies,
    # without a generation and without starting a segment of their own
    output, client = run_agent(host, "three_user_turns", max_assistant_turns=1)
    assert len(client.requests) == 1 and output.reward == 3.0
    assert output.metrics["openai_requests"] == 3 and output.metrics["openai_segments"] == 1
    assert output.num_turns == 1


def test_malformed_requests_get_openai_errors_and_unknown_urls_404(host):
    async def probe():
        endpoint = await endpoint_on_this_loop()
        from verl_lite.workers.openai_api import ChatSession
        from verl_lite.workers.tools.rendering import ChatRenderer

        session = ChatSession(ChatRenderer(host.tokenizer), None, SAMPLED, RolloutConfig())
        token, url = endpoint.open(session)
        client = openai.AsyncOpenAI(
            base_url=url, api_key="x", max_retries=0, http_client=httpx.AsyncClient(trust_env=False)
        )
        errors = {}
        user = [{"role": "user", "content": "hi"}]
        for name, kwargs in {
            "n": dict(messages=user, n=2),
            "messages[0].role": dict(messages=[{"role": "wizard", "content": "hi"}]),
            "temperature": dict(messages=user, temperature=3.0),
            "tool_choice": dict(messages=user, tool_choice="required"),
            "messages": dict(messages=[]),
        }.items():
            with pytest.raises(openai.BadRequestError) as err:
                await client.chat.completions.create(model="m", **kwargs)
            errors[name] = (err.value.status_code, err.value.body["param"])
        models = await client.models.list()
        endpoint.close(token)
        with pytest.raises(openai.NotFoundError):
            await client.models.list()
        async with httpx.AsyncClient(trust_env=False) as http:
            bad_json = await http.post(
                f"http://127.0.0.1:{endpoint.port}/{token}x/v1/chat/completions", content=b"{"
            )
        await client.close()
        return errors, [m.id for m in models.data], bad_json.status_code

    errors, models, unknown = host.call(probe())
    assert errors == {name: (400, name) for name in errors}
    assert models == ["verl-lite-policy"] and unknown == 404


def test_agent_function_is_checked_when_loaded(tmp_path):
    sync = tmp_path / "sync_agent.py"
    sync.write_text("def agent(client, row):\n    return 1.0\n")
    with pytest.raises(ValueError, match="is not an async function"):
        load_agent(str(sync), "agent")
    with pytest.raises(ValueError, match="has no function 'missing'"):
        load_agent(str(sync), "missing")
    with pytest.raises(ValueError, match="path is null"):
        load_agent(None, "agent")
