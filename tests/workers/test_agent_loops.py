"""Agent loops: token ids equal the chat template's rendering, the mask marks exactly the model's tokens, and
every multi-turn limit stops the loop where it should.

The policy is scripted (``ScriptedClient`` replays fixed token sequences through the ``ServerClient``
interface); the tokenizer, chat template, parser and tools are the real ones. The last tests run the real
tiny model through a minimal ``model.generate`` client.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import torch

from verl_lite.trainer.validation import EMBEDDED_MODEL
from verl_lite.workers.agent_loop import AgentLoopContext, get_agent_loop
from verl_lite.workers.config import MultiTurnConfig, RolloutConfig, SamplingConfig
from verl_lite.workers.rollout.server import TokenOutput
from verl_lite.workers.tools import TOOL_CHAT_TEMPLATE, BaseTool, ToolResponse, tool
from verl_lite.workers.tools.calculator import calculator

SAMPLING = SamplingConfig()
CALC = calculator.tool_schema


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(EMBEDDED_MODEL)


class ScriptedClient:
    """Replays one assistant turn per ``generate`` call, cut to ``max_tokens`` like a real server."""

    def __init__(
        self, tok, turns: list[str], versions: list[int] | None = None, finish: list[str] | None = None
    ):
        self.turns = [tok.encode(t, add_special_tokens=False) + [tok.eos_token_id] for t in turns]
        self.versions, self.finish = versions or [0] * len(turns), finish or ["stop"] * len(turns)
        self.calls: list[tuple[list[int], int]] = []

    async def generate(self, prompt_ids, sampling, max_tokens):
        i = len(self.calls)
        self.calls.append((list(prompt_ids), max_tokens))
        ids = self.turns[i][:max_tokens]
        finish = "length" if len(ids) < len(self.turns[i]) else self.finish[i]
        # distinct per-token log-probs show where model tokens landed: -(turn + 1) - position / 1000
        log_probs = [-(i + 1) - k / 1000 for k in range(len(ids))]
        return TokenOutput(ids, log_probs, finish, self.versions[i])


def call_text(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def tool_call(name: str, **arguments) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def make_loop(tok, name="tool_agent", tools=(calculator,), **multi_turn):
    config = RolloutConfig(multi_turn=MultiTurnConfig(**multi_turn))
    context = AgentLoopContext(tok, config, {t.name: t for t in tools}, chat_template=TOOL_CHAT_TEMPLATE)
    return get_agent_loop(name)(context)


def run(loop, row, client, max_tokens=400):
    return asyncio.run(loop.run(row, client, SAMPLING, max_tokens))


def render_ids(tok, messages, tools=None, add_generation_prompt=False) -> list[int]:
    text = tok.apply_chat_template(
        messages,
        tools=tools,
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
        chat_template=TOOL_CHAT_TEMPLATE,
    )
    return tok.encode(text, add_special_tokens=False)


def template_mask(tok, messages, tools) -> list[int]:
    """1 exactly on the tokens of each assistant message (its content, calls and EOS), 0 elsewhere."""
    full = render_ids(tok, messages, tools)
    mask = [0] * len(full)
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            start = len(render_ids(tok, messages[:i], tools, add_generation_prompt=True))
            end = len(render_ids(tok, messages[: i + 1], tools))
            mask[start:end] = [1] * (end - start)
    return mask


def observation_text(tok, out) -> list[str]:
    """Decoded runs of mask-0 tokens in the response."""
    runs, current = [], []
    for token, m in zip(out.response_ids + [None], out.response_mask + [1]):
        if m == 0:
            current.append(token)
        elif current:
            runs.append(tok.decode(current))
            current = []
    return runs


def check_invariants(out, max_tokens):
    n = len(out.response_ids)
    assert len(out.response_mask) == len(out.response_log_probs) == n <= max_tokens
    assert all(lp == 0.0 for lp, m in zip(out.response_log_probs, out.response_mask) if m == 0)


# ---- single turn -----------------------------------------------------------------------------


def test_single_turn_generates_once_and_masks_every_token(tok):
    client = ScriptedClient(tok, ["7"], versions=[3])
    out = run(make_loop(tok, "single_turn"), {"prompt_ids": [4, 5, 6]}, client, max_tokens=10)
    assert client.calls == [([4, 5, 6], 10)]
    assert out.response_ids == client.turns[0] and out.response_mask == [1, 1]
    assert out.response_log_probs == [-1.0, -1.001] and out.num_turns == 1
    assert (out.min_weight_version, out.max_weight_version, out.finish_reason) == (3, 3, "stop")


# ---- tokens and mask against the chat template -----------------------------------------------


@pytest.mark.parametrize("parallel", [1, 2])
def test_trajectory_is_the_chat_templates_rendering_and_mask_is_one_exactly_on_assistant_spans(tok, parallel):
    exprs = ["3+4", "2*5"][:parallel]
    turns = ["Let me compute. " + "".join(call_text("calculator", expression=e) for e in exprs), "7 and 10"]
    client = ScriptedClient(tok, turns, versions=[1, 2])
    user = {"role": "user", "content": "What is 3+4 and 2*5?"}
    out = run(make_loop(tok, max_parallel_calls=2), {"prompt_ids": [9], "messages": [user]}, client)

    conversation = [
        user,
        {
            "role": "assistant",
            "content": "Let me compute. ",
            "tool_calls": [tool_call("calculator", expression=e) for e in exprs],
        },
        *({"role": "tool", "content": r} for r in ["7", "10"][:parallel]),
        {"role": "assistant", "content": "7 and 10"},
    ]
    assert out.prompt_ids == render_ids(tok, [user], [CALC], add_generation_prompt=True)
    assert out.prompt_ids + out.response_ids == render_ids(tok, conversation, [CALC])
    assert [0] * len(out.prompt_ids) + out.response_mask == template_mask(tok, conversation, [CALC])
    model_lps = [lp for lp, m in zip(out.response_log_probs, out.response_mask) if m == 1]
    assert model_lps == [-1 - k / 1000 for k in range(len(client.turns[0]))] + [
        -2 - k / 1000 for k in range(len(client.turns[1]))
    ]
    check_invariants(out, 400)
    # the second generation continues exactly the tokens so far (no re-tokenization of the model's turn)
    assert client.calls[1][0] == out.prompt_ids + out.response_ids[: -len(client.turns[1])]
    assert (out.finish_reason, out.num_turns, out.min_weight_version, out.max_weight_version) == (
        "stop",
        3,
        1,
        2,
    )
    assert out.metrics["tool_calls"] == parallel and out.metrics["tool_errors"] == 0
    assert out.metrics["tool_calls/calculator"] == parallel and out.metrics["tool_latency_s"] >= 0.0


def test_row_without_messages_starts_from_its_prompt_ids(tok):
    client = ScriptedClient(tok, ["no tools needed"])
    out = run(make_loop(tok), {"prompt_ids": [3, 76, 77, 1, 4]}, client)
    assert out.prompt_ids == [3, 76, 77, 1, 4] and client.calls[0][0] == [3, 76, 77, 1, 4]
    assert out.response_mask == [1] * len(out.response_ids) and out.finish_reason == "stop"
    assert out.metrics["tool_calls"] == 0 and out.num_turns == 1


# ---- limits ----------------------------------------------------------------------------------

ROW = {"prompt_ids": [9], "messages": [{"role": "user", "content": "Add."}]}
ALWAYS_CALL = [call_text("calculator", expression="1+1")] * 6


def test_max_assistant_turns_stops_after_that_many_generations(tok):
    client = ScriptedClient(tok, ALWAYS_CALL)
    out = run(make_loop(tok, max_assistant_turns=2), ROW, client)
    assert len(client.calls) == 2 and out.finish_reason == "max_assistant_turns"
    assert out.num_turns == 3 and out.metrics["tool_calls"] == 1  # gen, tool, gen (its call is not run)
    assert out.response_mask[-len(client.turns[1]) :] == [1] * len(client.turns[1])


def test_max_user_turns_stops_before_another_tool_turn(tok):
    client = ScriptedClient(tok, ALWAYS_CALL)
    out = run(make_loop(tok, max_user_turns=2), ROW, client)
    assert len(client.calls) == 3 and out.finish_reason == "max_user_turns"
    assert out.num_turns == 5 and out.metrics["tool_calls"] == 2 and out.metrics["user_turns"] == 2


def test_max_parallel_calls_runs_that_many_concurrently_and_drops_the_rest(tok):
    running, peak = [0], [0]

    @tool
    async def slow_echo(text: str) -> str:
        """Echo after a pause."""
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        await asyncio.sleep(0.05)
        running[0] -= 1
        return text

    turns = ["".join(call_text("slow_echo", text=t) for t in "abc"), "done"]
    out = run(make_loop(tok, tools=[slow_echo], max_parallel_calls=2), ROW, ScriptedClient(tok, turns))
    assert peak[0] == 2 and out.metrics["tool_calls"] == 2 and out.metrics["tool_calls_dropped"] == 1
    obs = "<|user|><tool_response>a</tool_response><|end|><|user|><tool_response>b</tool_response><|end|><|assistant|>"
    assert observation_text(tok, out) == [obs]


@pytest.mark.parametrize(
    "side, shown",
    [
        ("left", "01234567...(truncated)"),
        ("middle", "0123...(truncated)...GHIJ"),
        ("right", "(truncated)...CDEFGHIJ"),
    ],
)
def test_long_tool_response_is_cut_to_max_tool_response_length_on_the_configured_side(tok, side, shown):
    @tool
    def long_text() -> str:
        """Twenty characters."""
        return "0123456789ABCDEFGHIJ"

    loop = make_loop(tok, tools=[long_text], max_tool_response_length=8, tool_response_truncate_side=side)
    out = run(loop, ROW, ScriptedClient(tok, [call_text("long_text"), "ok"]))
    assert observation_text(tok, out) == [
        f"<|user|><tool_response>{shown}</tool_response><|end|><|assistant|>"
    ]


def test_observation_that_overflows_the_response_budget_is_cut_and_ends_the_loop(tok):
    client = ScriptedClient(tok, ALWAYS_CALL)
    first = len(client.turns[0])
    out = run(make_loop(tok), ROW, client, max_tokens=first + 3)
    assert len(client.calls) == 1 and out.finish_reason == "length"
    assert len(out.response_ids) == first + 3 and out.response_mask == [1] * first + [0, 0, 0]
    # the three kept tokens are the start of the observation "<|user|><tool_response>2</tool_response>..."
    assert out.response_ids[first:] == render_ids(tok, [{"role": "tool", "content": "2"}])[:3]
    check_invariants(out, first + 3)


def test_each_generation_gets_the_budget_left_and_a_cut_generation_ends_the_loop(tok):
    client = ScriptedClient(tok, ALWAYS_CALL)
    first = len(client.turns[0])
    observation = len(render_ids(tok, [{"role": "tool", "content": "2"}], add_generation_prompt=True))
    out = run(make_loop(tok), ROW, client, max_tokens=first + observation + 10)
    # budget - first turn - observation = 10 tokens left for the second turn, which is cut there
    assert [m for _, m in client.calls] == [first + observation + 10, 10]
    assert out.response_mask == [1] * first + [0] * observation + [1] * 10
    assert out.finish_reason == "length" and out.metrics["tool_calls"] == 1


def test_aborted_generation_ends_the_loop_without_running_its_calls(tok):
    client = ScriptedClient(tok, ALWAYS_CALL, finish=["abort"] * 6)
    out = run(make_loop(tok), ROW, client)
    assert len(client.calls) == 1 and out.finish_reason == "abort" and out.metrics["tool_calls"] == 0


# ---- tool failures ---------------------------------------------------------------------------


@tool
def boom(x: int) -> str:
    """Always fails."""
    raise RuntimeError("kaboom")


@tool
async def hang() -> str:
    """Never returns in time."""
    await asyncio.sleep(60)
    return "late"


@pytest.mark.parametrize(
    "turn, shown, counter",
    [
        (call_text("boom", x=1), "Error: boom failed: RuntimeError: kaboom", "tool_errors"),
        (call_text("hang"), "Error: hang did not finish within 0.2 s.", "tool_errors"),
        (call_text("nope"), "Error: unknown tool 'nope'; available: boom, calculator, hang.", "tool_errors"),
        (
            call_text("boom", y=1),
            "Error: boom failed: TypeError: boom: missing a required argument: 'x' (its parameters: x).",
            "tool_errors",
        ),
        (
            '<tool_call>{"name": "calculator", "arguments": {</tool_call>',
            'Error: tool call \'{"name"',
            "tool_parse_errors",
        ),
    ],
)
def test_failing_tool_call_is_an_error_observation_and_a_counted_metric(tok, turn, shown, counter):
    loop = make_loop(tok, tools=[boom, hang, calculator], tool_timeout_s=0.2)
    client = ScriptedClient(tok, [turn, "sorry"])
    out = run(loop, ROW, client)
    assert len(client.calls) == 2 and out.finish_reason == "stop"  # the model saw the error and went on
    [observation] = observation_text(tok, out)
    assert observation.startswith("<|user|><tool_response>" + shown)
    assert out.metrics[counter] == 1
    check_invariants(out, 400)


class CounterTool(BaseTool):
    """Counts calls per trajectory from a per-row start; its reward is the final count (verl's contract:
    the tool picks its own instance id, reads create_kwargs, returns (response, reward, metrics))."""

    tool_schema = {"type": "function", "function": {"name": "count", "parameters": {"type": "object"}}}

    def __init__(self, config=None, tool_schema=None):
        super().__init__(config, tool_schema)
        self.state: dict[str, int] = {}

    async def create(self, instance_id=None, **kwargs):
        instance_id = f"counter-{len(self.state)}"
        self.state[instance_id] = kwargs["create_kwargs"]["start"]
        return instance_id, ToolResponse()

    async def execute(self, instance_id, parameters, **kwargs):
        self.state[instance_id] += 1
        # an image the text-only prompt cannot show: counted, not shown
        shown = ToolResponse(text=str(self.state[instance_id]), image=["<png>"])
        return shown, 0.5, {"value": self.state[instance_id]}

    async def calc_reward(self, instance_id, **kwargs):
        return float(self.state[instance_id])

    async def release(self, instance_id, **kwargs):
        del self.state[instance_id]


def test_tool_state_lives_per_trajectory_and_its_reward_is_reported_then_released(tok):
    counter = CounterTool()
    row = {**ROW, "tools_kwargs": {"count": {"create_kwargs": {"start": 10}}}}
    out = run(make_loop(tok, tools=[counter]), row, ScriptedClient(tok, [call_text("count")] * 2 + ["done"]))
    # 10 -> 11 -> 12: the observations show the shared state, calc_reward the final count
    assert [o.split("<tool_response>")[1].split("<")[0] for o in observation_text(tok, out)] == ["11", "12"]
    assert out.tool_rewards == {"count": 12.0} and counter.state == {}
    assert out.metrics["tool_reward"] == 12.0 and out.metrics["tool_media_dropped"] == 2
    assert out.metrics["tool_step_reward"] == 1.0 and out.metrics["count/value"] == 11.5


class BrokenTool(CounterTool):
    """A tool whose per-trajectory start and final reward both fail."""

    tool_schema = {"type": "function", "function": {"name": "broken", "parameters": {"type": "object"}}}

    async def create(self, instance_id=None, **kwargs):
        raise OSError("no sandbox")


def test_tool_that_cannot_start_is_an_error_observation_and_the_loop_goes_on(tok):
    out = run(make_loop(tok, tools=[BrokenTool()]), ROW, ScriptedClient(tok, [call_text("broken"), "ok"]))
    [observation] = observation_text(tok, out)
    assert "Error: tool 'broken' could not start: OSError: no sandbox" in observation
    assert out.metrics["tool_errors"] == 1 and out.finish_reason == "stop" and out.tool_rewards == {}


# ---- the real tiny model ---------------------------------------------------------------------


class HFClient:
    """The tiny model's ``generate`` behind the ``ServerClient`` interface (one sample per call)."""

    def __init__(self, model, eos_token_id: int, scripted: list[list[int]] = ()):
        self.model, self.eos, self.scripted = model, eos_token_id, list(scripted)

    async def generate(self, prompt_ids, sampling, max_tokens):
        if self.scripted:  # a forced opening turn makes the untrained model take a tool turn
            ids = self.scripted.pop(0)
            return TokenOutput(ids, [-0.5] * len(ids), "stop", 0)
        out = self.model.generate(
            torch.tensor([prompt_ids]),
            max_new_tokens=max_tokens,
            do_sample=True,
            top_k=0,
            eos_token_id=self.eos,
            pad_token_id=0,
            output_scores=True,
            return_dict_in_generate=True,
        )
        ids = out.sequences[0, len(prompt_ids) :].tolist()
        if self.eos in ids:
            ids = ids[: ids.index(self.eos) + 1]
        log_probs = [torch.log_softmax(s[0], -1)[t].item() for s, t in zip(out.scores, ids)]
        return TokenOutput(ids, log_probs, "stop" if ids[-1:] == [self.eos] else "length", 0)


@pytest.fixture(scope="module")
def tiny_model():
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(EMBEDDED_MODEL).eval()


@pytest.mark.parametrize("name", ["single_turn", "tool_agent"])
def test_real_tiny_model_trajectory_keeps_shape_and_mask_invariants(tok, tiny_model, name):
    row = {"prompt_ids": render_ids(tok, ROW["messages"], add_generation_prompt=True), **ROW}
    out = run(make_loop(tok, name), row, HFClient(tiny_model, tok.eos_token_id), max_tokens=24)
    check_invariants(out, 24)
    assert out.response_mask == [1] * len(out.response_ids)  # the untrained model calls no tool
    assert all(lp <= 0.0 for lp in out.response_log_probs) and out.finish_reason in ("stop", "length")


def test_real_tiny_model_continues_after_a_tool_observation(tok, tiny_model):
    forced = tok.encode(call_text("calculator", expression="6*7"), add_special_tokens=False) + [
        tok.eos_token_id
    ]
    client = HFClient(tiny_model, tok.eos_token_id, scripted=[forced])
    out = run(make_loop(tok, max_assistant_turns=2), ROW, client, max_tokens=200)
    check_invariants(out, 200)
    observation = render_ids(tok, [{"role": "tool", "content": "42"}], add_generation_prompt=True)
    n = len(forced)
    assert out.response_ids[: n + len(observation)] == forced + observation
    assert out.response_mask[: n + len(observation)] == [1] * n + [0] * len(observation)
    assert set(out.response_mask[n + len(observation) :]) <= {1} and out.num_turns >= 2
