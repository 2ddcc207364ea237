"""Turn raw GSM8K (``question``, ``answer`` ending "#### 72") into verl_lite's RL parquet schema.

Each row becomes::

    {"data_source": "openai/gsm8k",
     "prompt": [{"role": "user", "content": question + " " + INSTRUCTION}],
     "ability": "math",
     "reward_model": {"style": "rule", "ground_truth": "72"},
     "extra_info": {"split", "index", "answer" (raw worked answer), "question" (raw question)}}

Responses are scored with ``verl_lite.data.scoring.compute_score`` (the last "#### <int>").

    # from the hub (openai/gsm8k, config "main"): writes train.parquet and test.parquet
    python examples/data_preprocess/gsm8k.py --local_save_dir ~/data/gsm8k
    # from raw files: a folder with {train,test}.{jsonl,parquet}, or one file with --splits
    python examples/data_preprocess/gsm8k.py --input raw/test.jsonl --splits test --local_save_dir out
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pandas as pd

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
_FINAL = re.compile(r"####\s*(-?[0-9.,]+)")


def extract_solution(answer: str) -> str:
    """The final answer after "####" with thousands separators removed ("#### 1,200" -> "1200")."""
    match = _FINAL.search(answer)
    if match is None:
        raise ValueError(f"extract_solution: no '#### <number>' in answer {answer[-80:]!r}.")
    return match.group(1).replace(",", "")


def to_rl_row(example: dict[str, Any], split: str, index: int) -> dict[str, Any]:
    """One raw GSM8K example as an RL prompt row."""
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"{example['question']} {INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": extract_solution(example["answer"])},
        "extra_info": {
            "split": split,
            "index": index,
            "answer": example["answer"],
            "question": example["question"],
        },
    }


def read_raw_file(path: Path) -> list[dict[str, Any]]:
    """Raw examples from a ``.jsonl`` or ``.parquet`` file."""
    if path.suffix == ".jsonl":
        return pd.read_json(path, lines=True).to_dict("records")
    if path.suffix == ".parquet":
        return pd.read_parquet(path).to_dict("records")
    raise ValueError(f"read_raw_file: expected a .jsonl or .parquet file, got {path}.")


def load_raw(split: str, input_path: str | None) -> list[dict[str, Any]]:
    """Raw examples of ``split``: from the hub when ``input_path`` is None, else from local files.

    ``input_path`` is either one file (used for the split as given) or a folder holding
    ``<split>.jsonl``, ``<split>.parquet`` or ``<split>-*.parquet`` (the hub's file layout).
    """
    if input_path is None:
        from datasets import load_dataset

        return list(load_dataset("openai/gsm8k", "main", split=split))
    path = Path(input_path)
    if path.is_file():
        return read_raw_file(path)
    files = sorted(
        [*path.glob(f"{split}.jsonl"), *path.glob(f"{split}.parquet"), *path.glob(f"{split}-*.parquet")]
    )
    if not files:
        raise FileNotFoundError(
            f"load_raw: no {split}.jsonl / {split}.parquet / {split}-*.parquet in {path}."
        )
    return [row for file in files for row in read_raw_file(file)]


def preprocess(raw: list[dict[str, Any]], split: str) -> pd.DataFrame:
    """RL rows of one split, indexed in input order."""
    return pd.DataFrame([to_rl_row(example, split, index) for index, example in enumerate(raw)])


def main(argv: list[str] | None = None) -> dict[str, Path]:
    """Command-line entry point; returns the written parquet paths by split."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", default=None, help="raw GSM8K file or folder (default: the hub)")
    parser.add_argument("--local_save_dir", default="~/data/gsm8k", help="output folder")
    parser.add_argument("--splits", nargs="+", default=["train", "test"])
    args = parser.parse_args(argv)
    out = Path(args.local_save_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split in args.splits:
        frame = preprocess(load_raw(split, args.input), split)
        paths[split] = out / f"{split}.parquet"
        frame.to_parquet(paths[split], index=False)
        print(f"{split}: {len(frame)} rows -> {paths[split]}")
    return paths


if __name__ == "__main__":
    main()
