"""examples/data_preprocess/gsm8k.py on a local fixture in GSM8K's raw format."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "gsm8k_raw.jsonl"


def _load_script():
    spec = importlib.util.spec_from_file_location(
        "gsm8k_preprocess", ROOT / "examples/data_preprocess/gsm8k.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_raw_gsm8k_becomes_rl_rows_with_the_final_answer_as_ground_truth(tmp_path):
    gsm8k = _load_script()
    paths = gsm8k.main(["--input", str(FIXTURE), "--splits", "test", "--local_save_dir", str(tmp_path)])
    rows = pd.read_parquet(paths["test"])
    assert len(rows) == 5
    assert rows["reward_model"].map(lambda r: r["ground_truth"]).tolist() == ["72", "10", "1200", "-5", "11"]
    first = rows.iloc[0]
    assert first["data_source"] == "openai/gsm8k" and first["ability"] == "math"
    content = first["prompt"][0]["content"]
    assert content.startswith("Natalia sold clips") and content.endswith('final answer after "####".')
    assert first["extra_info"]["answer"].endswith("#### 72")
    assert rows["extra_info"].map(lambda e: (e["split"], e["index"])).tolist() == [
        ("test", i) for i in range(5)
    ]


def test_a_folder_input_is_read_per_split(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "train.jsonl").write_text(FIXTURE.read_text())
    gsm8k = _load_script()
    paths = gsm8k.main(["--input", str(raw), "--splits", "train", "--local_save_dir", str(tmp_path / "out")])
    assert len(pd.read_parquet(paths["train"])) == 5
