"""Generate the synthetic arithmetic word-problem task (verifiable ``#### <answer>`` format) as parquet.

A problem is a short story about one person's objects followed by a question, e.g.::

    Tom has 3 apples. He buys 4 more and gives away 2. How many apples does Tom have now?

and its worked solution has one equation per line and ends with the GSM8K answer marker::

    3+4=7
    7-2=5
    #### 5

Generation is seeded and deterministic. The RL splits (``train``, ``val``) use the GSM8K
preprocessing schema (``data_source``, ``prompt``, ``ability``, ``reward_model``, ``extra_info``);
the ``sft`` split holds chat rows (``messages``: user question, assistant answer). No question
appears in two splits. Answers are scored with :func:`compute_score` (from ``scoring.py``).

The SFT answers mix two styles, as real data does: most rows answer ``#### 5`` directly, the rest
work it out. A tiny model rarely computes a direct answer right, so after SFT its greedy decoding
mostly guesses; sampling also produces worked solutions, which score far better, and RL learns to
prefer them. That gap is what the GRPO demo closes (``SFT_DIRECT_FRACTION`` sets it).

CLI::

    python -m verl_lite.data.synthetic --out DIR --n_train 2000 --n_val 200 --n_sft 8000
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from verl_lite.data.scoring import compute_score

__all__ = [
    "DATA_SOURCE",
    "SFT_DIRECT_FRACTION",
    "ArithmeticSpec",
    "Problem",
    "compute_score",
    "generate_splits",
    "iter_rows",
    "make_problem",
    "rl_row",
    "sft_row",
    "write_parquet",
]

DATA_SOURCE = "synthetic_arith"
# share of SFT rows that answer "#### <answer>" without working it out (see the module docstring)
SFT_DIRECT_FRACTION = 0.6

_PEOPLE = [
    ("Tom", "He"),
    ("Anna", "She"),
    ("Ben", "He"),
    ("Mia", "She"),
    ("Sam", "He"),
    ("Lily", "She"),
    ("Max", "He"),
    ("Emma", "She"),
    ("Leo", "He"),
    ("Zoe", "She"),
]
_OBJECTS = [
    "apples",
    "books",
    "coins",
    "marbles",
    "stickers",
    "pencils",
    "cards",
    "shells",
    "stamps",
    "cookies",
]
_ADD_PHRASES = ["buys {n} more", "finds {n} more", "gets {n} from a friend", "wins {n}", "picks up {n} more"]
_SUB_PHRASES = ["gives away {n}", "loses {n}", "sells {n}", "gives {n} to a friend", "uses {n}"]


@dataclass(frozen=True)
class ArithmeticSpec:
    """Difficulty of the generated problems."""

    # fewest operations (add or subtract) applied to the starting amount
    min_steps: int = 2
    # most operations applied to the starting amount
    max_steps: int = 3
    # largest starting amount (the smallest is 2)
    max_start: int = 20
    # largest number added or subtracted in one operation (the smallest is 1)
    max_operand: int = 9
    # every intermediate amount stays within [0, max_value]
    max_value: int = 40

    def __post_init__(self) -> None:
        if not 1 <= self.min_steps <= self.max_steps:
            raise ValueError(
                f"ArithmeticSpec: need 1 <= min_steps <= max_steps, got {self.min_steps}, {self.max_steps}."
            )
        if not 2 <= self.max_start <= self.max_value or not 1 <= 2 * self.max_operand <= self.max_value:
            raise ValueError(
                f"ArithmeticSpec: need 2 <= max_start <= max_value and 1 <= 2 * max_operand <= max_value, got "
                f"max_start={self.max_start}, max_value={self.max_value}, max_operand={self.max_operand}."
            )


@dataclass(frozen=True)
class Problem:
    """One generated word problem with its worked solution."""

    question: str
    # worked solution, one equation per line, ending with "#### <answer>"
    solution: str
    answer: int


def _operations(rng: random.Random, start: int, spec: ArithmeticSpec) -> list[tuple[str, int, int]]:
    """Random ``(op, operand, result)`` steps from ``start``, keeping every amount in range."""
    steps, amount = [], start
    for _ in range(rng.randint(spec.min_steps, spec.max_steps)):
        operand = rng.randint(1, spec.max_operand)
        can_add = amount + operand <= spec.max_value
        can_sub = amount - operand >= 0
        # max_value >= 2 * max_operand guarantees that at least one of the two fits
        op = rng.choice(["+", "-"]) if can_add and can_sub else ("+" if can_add else "-")
        amount = amount + operand if op == "+" else amount - operand
        steps.append((op, operand, amount))
    return steps


def _story(pronoun: str, steps: list[tuple[str, int, int]], rng: random.Random) -> str:
    """Sentences describing ``steps``; consecutive steps are joined in pairs with "and"."""
    phrases = [rng.choice(_ADD_PHRASES if op == "+" else _SUB_PHRASES).format(n=n) for op, n, _ in steps]
    sentences = []
    while phrases:
        take = 2 if len(phrases) >= 2 and rng.random() < 0.5 else 1
        sentences.append(f"{pronoun} {' and '.join(phrases[:take])}.")
        phrases = phrases[take:]
    return " ".join(sentences)


def make_problem(rng: random.Random, spec: ArithmeticSpec) -> Problem:
    """Draw one problem from ``rng``."""
    name, pronoun = rng.choice(_PEOPLE)
    obj = rng.choice(_OBJECTS)
    start = rng.randint(2, spec.max_start)
    steps = _operations(rng, start, spec)
    question = f"{name} has {start} {obj}. {_story(pronoun, steps, rng)} How many {obj} does {name} have now?"
    lines, amount = [], start
    for op, operand, result in steps:
        lines.append(f"{amount}{op}{operand}={result}")
        amount = result
    lines.append(f"#### {amount}")
    return Problem(question=question, solution="\n".join(lines), answer=amount)


def generate_splits(
    sizes: dict[str, int],
    seed: int = 0,
    spec: ArithmeticSpec | None = None,
    draw: Callable[[random.Random], Any] | None = None,
) -> dict[str, list[Any]]:
    """Problems for each split, with no question shared between splits.

    Splits are filled in the order of ``sizes``, from one random stream seeded by ``seed``, so a split
    listed first does not change when later splits grow. ``draw(rng)`` makes one problem (anything with
    a ``question``; default :func:`make_problem` with ``spec``), so other tasks share the bookkeeping.
    """
    spec = spec or ArithmeticSpec()
    draw = draw or (lambda rng: make_problem(rng, spec))
    rng = random.Random(seed)
    seen: set[str] = set()
    splits: dict[str, list[Any]] = {}
    for split, size in sizes.items():
        problems: list[Any] = []
        for _ in range(100 * size + 100):
            if len(problems) == size:
                break
            problem = draw(rng)
            if problem.question not in seen:
                seen.add(problem.question)
                problems.append(problem)
        if len(problems) < size:
            raise ValueError(f"generate_splits: only {len(problems)} distinct problems for {split!r}.")
        splits[split] = problems
    return splits


def rl_row(problem: Problem, split: str, index: int) -> dict[str, Any]:
    """An RL prompt row in the GSM8K preprocessing schema."""
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": problem.question}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(problem.answer)},
        "extra_info": {
            "split": split,
            "index": index,
            "answer": problem.solution,
            "question": problem.question,
        },
    }


def sft_row(problem: Problem, split: str, index: int, direct: bool = False) -> dict[str, Any]:
    """A chat row for supervised fine-tuning: the question and its worked (or ``direct``) answer."""
    answer = f"#### {problem.answer}" if direct else problem.solution
    return {
        "data_source": DATA_SOURCE,
        "messages": [
            {"role": "user", "content": problem.question},
            {"role": "assistant", "content": answer},
        ],
        "extra_info": {"split": split, "index": index, "answer": str(problem.answer), "direct": direct},
    }


def iter_rows(
    split: str, problems: list[Problem], sft_direct_fraction: float = 0.0, seed: int = 0
) -> Iterator[dict[str, Any]]:
    """Rows of ``split`` in its schema: chat rows for ``sft``, RL prompt rows otherwise.

    A random ``sft_direct_fraction`` of the SFT rows answer with ``#### <answer>`` alone, skipping the
    worked solution (drawn from their own stream, so the problems do not depend on the fraction).
    """
    style_rng = random.Random(seed + 1_000_003)
    for index, problem in enumerate(problems):
        if split == "sft":
            yield sft_row(problem, split, index, direct=style_rng.random() < sft_direct_fraction)
        else:
            yield rl_row(problem, split, index)


def write_parquet(
    out_dir: str | Path,
    sizes: dict[str, int],
    seed: int = 0,
    spec: ArithmeticSpec | None = None,
    sft_direct_fraction: float = SFT_DIRECT_FRACTION,
) -> dict[str, Path]:
    """Generate the splits and write ``<out_dir>/<split>.parquet``; returns the written paths."""
    if not 0.0 <= sft_direct_fraction <= 1.0:
        raise ValueError(f"write_parquet: sft_direct_fraction must be in [0, 1], got {sft_direct_fraction}.")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, problems in generate_splits(sizes, seed, spec).items():
        paths[split] = out / f"{split}.parquet"
        rows = list(iter_rows(split, problems, sft_direct_fraction, seed))
        pd.DataFrame(rows).to_parquet(paths[split], index=False)
    return paths


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point: write train/val/sft parquet files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder for <split>.parquet")
    parser.add_argument("--n_train", type=int, default=2000, help="RL training prompts")
    parser.add_argument("--n_val", type=int, default=200, help="RL validation prompts")
    parser.add_argument("--n_sft", type=int, default=8000, help="SFT chat rows")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min_steps", type=int, default=ArithmeticSpec.min_steps)
    parser.add_argument("--max_steps", type=int, default=ArithmeticSpec.max_steps)
    parser.add_argument(
        "--sft_direct_fraction", type=float, default=SFT_DIRECT_FRACTION, help="SFT rows answering directly"
    )
    args = parser.parse_args(argv)
    spec = ArithmeticSpec(min_steps=args.min_steps, max_steps=args.max_steps)
    # val first: the evaluation set stays fixed when the training splits are resized
    sizes = {"val": args.n_val, "train": args.n_train, "sft": args.n_sft}
    for split, path in write_parquet(args.out, sizes, args.seed, spec, args.sft_direct_fraction).items():
        print(f"{split}: {sizes[split]} rows -> {path}")


if __name__ == "__main__":
    main()
