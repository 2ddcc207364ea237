"""Generate the calculator tool task (arithmetic word problems a tiny model can solve only with the tool).

A problem needs two operations on two- or three-digit numbers, e.g. a product::

    Tom has 23 bags of 47 apples. He gives away 158. How many apples does Tom have now?

or a sum (``Anna has 523 coins. She buys 347 more and gives away 158. ...``). A 1M-parameter model cannot
compute ``23*47-158`` in its head, but it can copy the numbers into a calculator call and copy the
result back. The worked trace, in OpenAI chat form (the ``tool_call`` hermes format comes from the chat
template, ``verl_lite.workers.tools.TOOL_CHAT_TEMPLATE``)::

    user:      the question
    assistant: tool_calls=[calculator(expression="23*47-158")]
    tool:      "923"
    assistant: "#### 923"

Splits (seeded, deterministic, no question in two of them):

* ``train`` / ``val``: RL prompt rows in the GSM8K schema of ``verl_lite.data.synthetic`` plus
  ``agent_name: "tool_agent"`` and ``messages`` (the chat the agent loop renders with the tool schemas).
* ``sft``: chat rows (``messages`` + ``tools``, the schemas as a JSON string). A tool trace gives two
  rows, one ending at the tool call and one ending at the answer after the tool result; SFT trains
  every assistant turn of a row, so the call is learned from both.

The SFT traces use the calculator only sometimes, and how often depends on the problem kind
(:data:`SFT_TOOL_PROB`: most product problems, few sum problems); the other traces answer directly
with the model's "own" arithmetic (``23*47-158=915`` then ``#### 915``), which is right only
:data:`SFT_DIRECT_CORRECT` of the time. Writing the expression there too doubles the examples of
copying the numbers out of the question, which is what lets the tiny model learn it in a few hundred
steps. After
SFT, greedy decoding calls the tool on products and guesses on sums, so validation accuracy sits near
the share of products while always calling the tool would solve nearly everything; sampling still calls
the tool on some sums, which is the signal RL needs to learn to call it there too.

CLI::

    python -m verl_lite.data.synthetic_tools --out DIR --n_train 2000 --n_val 200 --n_sft 6000
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from verl_lite.data.synthetic import generate_splits
from verl_lite.workers.tools.calculator import calculator

__all__ = [
    "AGENT_NAME",
    "CALCULATOR_SCHEMA",
    "DATA_SOURCE",
    "SFT_DIRECT_CORRECT",
    "SFT_TOOL_PROB",
    "CalcProblem",
    "CalcSpec",
    "iter_rows",
    "make_problem",
    "rl_row",
    "sft_rows",
    "sft_trace",
    "write_parquet",
]

# equals verl_lite.reward.scorers.synthetic_calc.CALC_DATA_SOURCE
DATA_SOURCE = "synthetic_calc"
# agent loop of the RL rows (the registered "tool_agent" loop runs tool calls)
AGENT_NAME = "tool_agent"
# the calculator in OpenAI function format, as rows and tool configs pass it to apply_chat_template
CALCULATOR_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression exactly (+, -, *, / and parentheses).",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "for example 23*47-158"}},
            "required": ["expression"],
        },
    },
}
# chance that an SFT trace of each problem kind calls the calculator (the rest answer directly)
SFT_TOOL_PROB = {"product": 0.9, "sum": 0.3}
# chance that a direct SFT answer is right (the rest are off in one digit, like slips of mental arithmetic)
SFT_DIRECT_CORRECT = 0.2

# Names and objects are single tokens of the tiny model's tokenizer and each operation has one phrase, so
# the numbers sit at nearly fixed offsets: a 1M-parameter model learns to copy them in a few hundred steps.
_PEOPLE = [("Tom", "He"), ("Anna", "She"), ("Ben", "He"), ("Mia", "She"), ("Sam", "He"), ("Zoe", "She")]
_OBJECTS = ["apples", "books", "coins", "marbles", "stickers", "pencils", "cards", "shells"]
_PHRASES = {"+": "buys {n} more", "-": "gives away {n}"}


@dataclass(frozen=True)
class CalcSpec:
    """Mix and number ranges of the generated problems."""

    # share of "product" problems (a*b+c, a*b-c); the rest are "sum" problems (a+b-c, a-b+c, ...)
    product_share: float = 0.45
    # factors of a product: two-digit numbers
    min_factor: int = 12
    max_factor: int = 99
    # amounts of a sum problem and the third number of a product problem: three digits
    min_amount: int = 100
    max_amount: int = 999
    # chance that an SFT trace calls the tool, per kind (see the module docstring)
    sft_tool_prob: dict[str, float] = field(default_factory=lambda: dict(SFT_TOOL_PROB))
    # chance that a direct SFT answer is right
    sft_direct_correct: float = SFT_DIRECT_CORRECT

    def __post_init__(self) -> None:
        probs = [self.product_share, self.sft_direct_correct, *self.sft_tool_prob.values()]
        if not all(0.0 <= p <= 1.0 for p in probs) or set(self.sft_tool_prob) != {"product", "sum"}:
            raise ValueError(
                "CalcSpec: product_share, sft_direct_correct and sft_tool_prob['product'|'sum'] must be "
                f"probabilities in [0, 1], got {self.product_share}, {self.sft_direct_correct}, "
                f"{self.sft_tool_prob}."
            )
        if not 2 <= self.min_factor <= self.max_factor or not 1 <= self.min_amount <= self.max_amount:
            raise ValueError(
                "CalcSpec: need 2 <= min_factor <= max_factor and 1 <= min_amount <= max_amount, got "
                f"{self.min_factor}, {self.max_factor}, {self.min_amount}, {self.max_amount}."
            )


@dataclass(frozen=True)
class CalcProblem:
    """One word problem, the calculator expression that solves it and its answer."""

    question: str
    # what the tool call passes, e.g. "23*47-158"
    expression: str
    answer: int
    # "product" or "sum"
    kind: str


def _phrase(op: str, n: int) -> str:
    return _PHRASES[op].format(n=n)


def make_problem(rng: random.Random, spec: CalcSpec) -> CalcProblem:
    """Draw one problem from ``rng`` (every amount in the story stays non-negative)."""
    name, pronoun = rng.choice(_PEOPLE)
    obj = rng.choice(_OBJECTS)
    if rng.random() < spec.product_share:
        a, b = rng.randint(spec.min_factor, spec.max_factor), rng.randint(spec.min_factor, spec.max_factor)
        c = rng.randint(spec.min_amount, spec.max_amount)
        op = rng.choice("+-") if c <= a * b else "+"
        start = f"{name} has {a} bags of {b} {obj}. {pronoun} {_phrase(op, c)}."
        kind, expression = "product", f"{a}*{b}{op}{c}"
    else:
        a, b = rng.randint(spec.min_amount, spec.max_amount), rng.randint(spec.min_amount, spec.max_amount)
        op1 = rng.choice("+-") if b <= a else "+"
        c = rng.randint(spec.min_amount, spec.max_amount)
        op2 = rng.choice("+-") if c <= (a + b if op1 == "+" else a - b) else "+"
        start = f"{name} has {a} {obj}. {pronoun} {_phrase(op1, b)} and {_phrase(op2, c)}."
        kind, expression = "sum", f"{a}{op1}{b}{op2}{c}"
    question = f"{start} How many {obj} does {name} have now?"
    return CalcProblem(
        question=question, expression=expression, answer=int(calculator(expression)), kind=kind
    )


def _slip(answer: int, rng: random.Random) -> int:
    """A plausibly wrong answer: ``answer`` with one digit off by 1-9 (never negative, never right)."""
    while True:
        place = 10 ** rng.randrange(len(str(answer)))
        wrong = answer + rng.choice([-1, 1]) * rng.randint(1, 9) * place
        if wrong >= 0 and wrong != answer:
            return wrong


def rl_row(problem: CalcProblem, split: str, index: int) -> dict[str, Any]:
    """An RL prompt row: the GSM8K schema plus ``agent_name`` and the chat ``messages``."""
    messages = [{"role": "user", "content": problem.question}]
    return {
        "data_source": DATA_SOURCE,
        "prompt": messages,
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(problem.answer)},
        "extra_info": {
            "split": split,
            "index": index,
            "answer": f"{problem.expression}={problem.answer}\n#### {problem.answer}",
            "question": problem.question,
            "expression": problem.expression,
            "kind": problem.kind,
        },
        "agent_name": AGENT_NAME,
        "messages": messages,
    }


def sft_trace(problem: CalcProblem, use_tool: bool, direct_answer: int | None = None) -> list[dict[str, Any]]:
    """The whole conversation of one SFT trace: via the calculator, or answering ``direct_answer`` at once."""
    user = {"role": "user", "content": problem.question}
    if not use_tool:
        answer = problem.answer if direct_answer is None else direct_answer
        return [user, {"role": "assistant", "content": f"{problem.expression}={answer}\n#### {answer}"}]
    call = {"name": "calculator", "arguments": {"expression": problem.expression}}
    return [
        user,
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": call}]},
        {"role": "tool", "name": "calculator", "content": calculator(problem.expression)},
        {"role": "assistant", "content": f"#### {problem.answer}"},
    ]


def sft_rows(
    problem: CalcProblem, split: str, index: int, use_tool: bool, direct_answer: int | None = None
) -> list[dict[str, Any]]:
    """SFT chat rows of one trace: one per assistant turn, each ending with that turn (the SFT target)."""
    messages = sft_trace(problem, use_tool, direct_answer)
    ends = [i + 1 for i, m in enumerate(messages) if m["role"] == "assistant"]
    answer = problem.answer if direct_answer is None else direct_answer
    return [
        {
            "data_source": DATA_SOURCE,
            "messages": messages[:end],
            "tools": json.dumps([CALCULATOR_SCHEMA]),
            "extra_info": {
                "split": split,
                "index": index,
                "kind": problem.kind,
                "use_tool": use_tool,
                "turn": turn,
                "correct": answer == problem.answer,
            },
        }
        for turn, end in enumerate(ends)
    ]


def iter_rows(
    split: str, problems: list[CalcProblem], spec: CalcSpec, seed: int = 0
) -> Iterator[dict[str, Any]]:
    """Rows of ``split`` in its schema: SFT chat rows for ``sft``, RL prompt rows otherwise.

    Whether a trace calls the tool and the direct answers come from their own random stream, so the
    problems do not depend on the SFT mix.
    """
    style_rng = random.Random(seed + 1_000_003)
    for index, problem in enumerate(problems):
        if split != "sft":
            yield rl_row(problem, split, index)
            continue
        use_tool = style_rng.random() < spec.sft_tool_prob[problem.kind]
        right = style_rng.random() < spec.sft_direct_correct
        direct = problem.answer if right else _slip(problem.answer, style_rng)
        yield from sft_rows(problem, split, index, use_tool, None if use_tool else direct)


def write_parquet(
    out_dir: str | Path, sizes: dict[str, int], seed: int = 0, spec: CalcSpec | None = None
) -> dict[str, Path]:
    """Generate the splits and write ``<out_dir>/<split>.parquet``; returns the written paths.

    ``sizes["sft"]`` counts traces; a tool trace writes two rows.
    """
    spec = spec or CalcSpec()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, problems in generate_splits(sizes, seed, draw=lambda rng: make_problem(rng, spec)).items():
        paths[split] = out / f"{split}.parquet"
        pd.DataFrame(list(iter_rows(split, problems, spec, seed))).to_parquet(paths[split], index=False)
    return paths


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point: write train/val/sft parquet files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder for <split>.parquet")
    parser.add_argument("--n_train", type=int, default=2000, help="RL training prompts")
    parser.add_argument("--n_val", type=int, default=200, help="RL validation prompts")
    parser.add_argument("--n_sft", type=int, default=6000, help="SFT traces (a tool trace is two rows)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    # val first: the evaluation set stays fixed when the training splits are resized
    sizes = {"val": args.n_val, "train": args.n_train, "sft": args.n_sft}
    for split, path in write_parquet(args.out, sizes, args.seed).items():
        print(f"{split}: {len(pd.read_parquet(path))} rows -> {path}")


if __name__ == "__main__":
    main()
