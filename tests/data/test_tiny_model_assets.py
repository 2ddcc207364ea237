"""The shipped tiny model and tokenizer load offline through the Auto classes and work together."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl_lite.data.task_eval import generate_responses

ASSETS = Path(__file__).resolve().parents[2] / "verl_lite" / "assets"
MODEL_DIR = ASSETS / "tiny_model"


def test_shipped_tokenizer_round_trips_spaces_and_newlines():
    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    text = "Tom has 13 apples.\nHe  buys 4 more.\n\n#### 17"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    assert tokenizer.eos_token == "<|end|>" and tokenizer.pad_token == "<|endoftext|>"


def test_shipped_model_loads_and_answers_in_the_task_format():
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    model = AutoModelForCausalLM.from_pretrained(MODEL_DIR)
    config = model.config
    assert config.model_type == "qwen2" and config.hidden_size // config.num_attention_heads == 32
    assert config.vocab_size == len(tokenizer)
    assert sum(p.numel() for p in model.parameters()) < 5_000_000
    rows = pd.read_parquet(ASSETS / "synthetic" / "val.parquet").head(4).to_dict("records")
    responses = generate_responses(model, tokenizer, [list(r["prompt"]) for r in rows], max_new_tokens=48)
    assert all("####" in texts[0] for texts in responses)
