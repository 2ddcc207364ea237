"""Tools: the safe calculator, the @tool schema, BaseTool's schema check and the yaml tool list."""

from __future__ import annotations

import asyncio
import concurrent.futures
import textwrap
import threading
from typing import Literal

import pytest

from verl_lite.workers.tools import BaseTool, FunctionTool, ToolConfigError, ToolResponse, load_tools, tool
from verl_lite.workers.tools.calculator import calculator, evaluate

# ---- calculator ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("1 + 2 * 3", "7"),
        ("(12 + 7) * 3", "57"),
        ("7 / 2", "3.5"),
        ("6 / 3", "2"),  # an integral float is shown as an integer
        ("7 // 2", "3"),
        ("-7 % 3", "2"),  # python's modulo: -7 = 3 * (-3) + 2
        ("-3 ** 2", "-9"),  # ** binds tighter than unary minus
        ("2 ** -1", "0.5"),
        ("0.1 + 0.2", "0.3"),  # 12 significant digits
        ("123456789 * 987654321", "121932631112635269"),
    ],
)
def test_calculator_computes_exact_arithmetic(expression, expected):
    assert calculator(expression) == expected


@pytest.mark.parametrize(
    "expression, message",
    [
        ("x + 1", "the name 'x' is not allowed"),
        ("abs(-1)", "a function call is not allowed"),
        ("__import__('os').system('true')", "a function call is not allowed"),
        ("(1).real", "attribute access (.real) is not allowed"),
        ("[1][0]", "the construct Subscript is not allowed"),
        ("1 < 2", "the construct Compare is not allowed"),
        ("True + 1", "the constant True is not allowed"),
        ("'a' * 3", "the constant 'a' is not allowed"),
        ("+1", "the operator UAdd is not allowed"),
        ("1 & 3", "the operator BitAnd is not allowed"),
        ("1 +", "is not an arithmetic expression"),
        ("9 ** 9 ** 9", "has more than 4096 bits"),  # refused before it is computed
        ("1e308 * 10", "too large for a floating-point number"),
        ("(-8) ** 0.5", "not a real number"),
    ],
)
def test_calculator_refuses_everything_but_arithmetic(expression, message):
    with pytest.raises(ValueError) as err:
        evaluate(expression)
    assert message in str(err.value)


def test_calculator_division_by_zero_raises():
    with pytest.raises(ZeroDivisionError):
        evaluate("1 / (2 - 2)")


def test_calculator_is_a_tool_with_a_schema_from_its_signature():
    assert isinstance(calculator, BaseTool) and calculator.name == "calculator"
    params = calculator.tool_schema["function"]["parameters"]
    assert params["required"] == ["expression"] and params["properties"]["expression"]["type"] == "string"
    assert asyncio.run(calculator.execute("i", {"expression": "2 + 2"})) == (ToolResponse(text="4"), None, {})


# ---- @tool -----------------------------------------------------------------------------------


@tool
def search(
    query: str, top_k: int = 3, mode: Literal["fast", "exact"] = "fast", tags: list[str] | None = None
):
    """Search the corpus.

    More detail that is not the summary.

    Args:
        query: what to look for,
            over two lines.
        top_k (int): how many hits.
    """
    return {"query": query, "top_k": top_k}


@tool(name="sleepy", description="Wait, then answer.")
async def wait_then_answer(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "done"


def test_tool_schema_comes_from_signature_annotations_and_docstring():
    assert search.tool_schema == {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the corpus.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "what to look for, over two lines."},
                    "top_k": {"type": "integer", "description": "how many hits."},
                    "mode": {"type": "string", "enum": ["fast", "exact"]},
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["query"],
            },
        },
    }


def test_tool_runs_sync_and_async_functions_and_stays_callable():
    assert search("a") == {"query": "a", "top_k": 3}
    assert (
        asyncio.run(search.execute("i", {"query": "a", "top_k": 1}))[0].text == '{"query": "a", "top_k": 1}'
    )
    assert wait_then_answer.name == "sleepy"
    assert wait_then_answer.tool_schema["function"]["description"] == "Wait, then answer."
    assert asyncio.run(wait_then_answer.execute("i", {"seconds": 0}))[0].text == "done"


def test_a_sync_tool_that_never_returns_leaves_the_default_thread_pool_free():
    release = threading.Event()

    @tool
    def stuck(x: int) -> str:
        """Never returns (until the test ends)."""
        release.wait()
        return str(x)

    stuck._threads.size = 2  # two hung calls fill this tool's threads

    async def scenario():
        loop = asyncio.get_running_loop()
        loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=1))
        for x in range(3):  # the third one waits for a thread of its own tool, and times out too
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(stuck.execute("i", {"x": x}), 0.2)
        # the default pool (the agent loop's and the server's) still runs work at once
        return await asyncio.wait_for(asyncio.to_thread(lambda: "free"), 1.0)

    try:
        assert asyncio.run(scenario()) == "free"
    finally:
        release.set()


def test_tool_call_with_unknown_or_missing_arguments_names_the_parameters():
    with pytest.raises(TypeError, match=r"search: .*\(its parameters: query, top_k, mode, tags\)"):
        asyncio.run(search.execute("i", {"q": "a"}))


def test_tool_refuses_untyped_or_unsupported_parameters():
    def untyped(x):
        return x

    def odd(x: complex):
        return x

    with pytest.raises(TypeError, match="parameter 'x' has no type annotation"):
        tool(untyped)
    with pytest.raises(TypeError, match="parameter 'x' has type <class 'complex'>, which has no JSON schema"):
        tool(odd)


def test_base_tool_rejects_a_schema_that_is_not_an_openai_function():
    class Echo(BaseTool):
        async def execute(self, instance_id, parameters, **kwargs):
            return ToolResponse(text=str(parameters)), None, {}

    with pytest.raises(ValueError, match="Echo has no tool_schema"):
        Echo()
    with pytest.raises(ValueError, match="is not an OpenAI function schema"):
        Echo(tool_schema={"name": "echo"})
    assert Echo(tool_schema={"type": "function", "function": {"name": "echo"}}).name == "echo"


# ---- yaml tool list --------------------------------------------------------------------------


class CounterTool(BaseTool):
    """A stateful test tool: counts calls per trajectory; its reward is the count."""

    tool_schema = {"type": "function", "function": {"name": "count", "parameters": {"type": "object"}}}

    def __init__(self, config=None, tool_schema=None):
        super().__init__(config, tool_schema)
        self.counts: dict[str, int] = {}

    async def create(self, instance_id=None, **kwargs):
        self.counts[instance_id] = kwargs.get("create_kwargs", {}).get("start", 0)
        return instance_id, ToolResponse()

    async def execute(self, instance_id, parameters, **kwargs):
        self.counts[instance_id] += self.config.get("step", 1)
        return ToolResponse(text=str(self.counts[instance_id])), None, {}

    async def calc_reward(self, instance_id, **kwargs):
        return float(self.counts[instance_id])

    async def release(self, instance_id, **kwargs):
        del self.counts[instance_id]


def _write(tmp_path, text: str) -> str:
    path = tmp_path / "tools.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_yaml_tool_list_loads_classes_and_tool_functions(tmp_path):
    path = _write(
        tmp_path,
        """
        tools:
          - class_name: verl_lite.workers.tools.calculator.calculator
          - class_name: tests.workers.test_tools.CounterTool
            config: {step: 2}
            tool_schema:
              type: function
              function: {name: counter, description: Count., parameters: {type: object, properties: {}}}
        """,
    )
    tools = load_tools(path)
    assert sorted(tools) == ["calculator", "counter"]
    assert isinstance(tools["calculator"], FunctionTool) and tools["counter"].config == {"step": 2}
    assert asyncio.run(tools["calculator"].execute("i", {"expression": "6*7"}))[0].text == "42"


def test_the_shipped_calculator_tool_list_loads():
    assert list(load_tools("verl_lite/configs/tools/calculator.yaml")) == ["calculator"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("tools: 3", "must hold a top-level 'tools' list"),
        ("- class_name: a.b", "must hold a top-level 'tools' list"),
        ("tools: [{config: {}}]", "tools[0] needs a class_name string"),
        ("tools: [{class_name: a.b, kind: x}]", "tools[0] has unknown keys ['kind']; valid keys: class_name"),
        ("tools: [{class_name: Calculator}]", "tools[0]: class_name 'Calculator' must be a dotted path"),
        ("tools: [{class_name: no_such_pkg.Tool}]", "class_name 'no_such_pkg.Tool' cannot be imported"),
        (
            "tools: [{class_name: verl_lite.workers.tools.Nope}]",
            "module verl_lite.workers.tools has no 'Nope'",
        ),
        (
            "tools: [{class_name: json.dumps}]",
            "json.dumps is a function, not a tool class (a BaseTool with verl's execute) or a @tool",
        ),
        (
            "tools: [{class_name: tests.workers.test_tools.CounterTool, config: 3}]",
            "tools[0].config must be a mapping",
        ),
        (
            "tools: [{class_name: tests.workers.test_tools.CounterTool, tool_schema: {name: x}}]",
            "tools[0]: tool_schema {'name': 'x'} is not an OpenAI function schema",
        ),
        (
            "tools: [{class_name: verl_lite.workers.tools.BaseTool}]",
            "tools[0] (verl_lite.workers.tools.BaseTool) needs a tool_schema",
        ),
        (
            "tools:\n- class_name: verl_lite.workers.tools.calculator.calculator\n"
            "- class_name: verl_lite.workers.tools.calculator.calculator",
            "tools[1] is a second tool named 'calculator'",
        ),
        ("tools: [", "is not valid yaml"),
    ],
)
def test_bad_yaml_tool_list_is_one_sentence_naming_file_and_entry(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(ToolConfigError) as err:
        load_tools(path)
    assert str(err.value).startswith(f"tool config {path}") and message in str(err.value)


def test_missing_tool_file_names_the_key_to_set():
    with pytest.raises(ToolConfigError, match="tool config /no/tools.yaml does not exist; set multi_turn"):
        load_tools("/no/tools.yaml")
