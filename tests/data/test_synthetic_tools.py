"""The calculator tool task: generator, scorer, SFT rows through the tool template, agent asset."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from verl_lite.data import synthetic_tools as st
from verl_lite.data.sft_dataset import IGNORE_INDEX, SFTDataset
from verl_lite.data.synthetic import generate_splits
from verl_lite.reward.scorers import default_compute_score
from verl_lite.workers.tools import TOOL_CHAT_TEMPLATE
from verl_lite.workers.tools.calculator import calculator
from verl_lite.workers.tools.parsers import parse_hermes

ASSETS = Path(__file__).resolve().parents[2] / "verl_lite" / "assets"
AGENT_DIR = ASSETS / "tiny_agent_model"
SIZES = {"val": 20, "train": 30, "sft": 60}


def _splits(seed: int = 0) -> dict[str, list[st.CalcProblem]]:
    spec = st.CalcSpec()
    return generate_splits(SIZES, seed, draw=lambda rng: st.make_problem(rng, spec))


@pytest.fixture(scope="module")
def tool_tokenizer():
    """The shipped tiny model's tokenizer with the tool chat template."""
    tokenizer = PreTrainedTokenizerFast.from_pretrained(ASSETS / "tiny_model")
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    return tokenizer


def test_same_seed_gives_the_same_rows_and_another_seed_does_not(tmp_path):
    assert _splits(3) == _splits(3) and _splits(3)["val"] != _splits(4)["val"]
    first = st.write_parquet(tmp_path / "a", SIZES, seed=5)
    second = st.write_parquet(tmp_path / "b", SIZES, seed=5)
    for split in SIZES:
        assert first[split].read_bytes() == second[split].read_bytes()


def test_expressions_evaluate_to_the_answer_with_both_kinds_present():
    problems = generate_splits({"val": 200}, 1, draw=lambda rng: st.make_problem(rng, st.CalcSpec()))["val"]
    for problem in problems:
        assert eval(problem.expression) == problem.answer >= 0  # "23*47-158" -> 923
    assert {p.kind for p in problems} == {"product", "sum"}


def test_rl_rows_carry_the_agent_name_messages_and_the_gsm8k_schema(tmp_path):
    val = pd.read_parquet(st.write_parquet(tmp_path, SIZES, seed=0)["val"]).iloc[0]
    assert val["data_source"] == st.DATA_SOURCE and val["agent_name"] == "tool_agent"
    assert (
        list(val["messages"])
        == list(val["prompt"])
        == [{"role": "user", "content": val["extra_info"]["question"]}]
    )
    assert val["reward_model"]["ground_truth"] == calculator(val["extra_info"]["expression"])


@pytest.mark.parametrize(
    "response, score",
    [
        (
            '<tool_call>{"name": "calculator"}</tool_call><|user|><tool_response>923</tool_response>#### 923',
            1.0,
        ),
        ("#### 923", 1.0),
        ("#### 924", 0.0),  # wrong
        ("923", 0.0),  # no answer marker
        ("#### ", 0.0),  # marker without a number
        # the number only inside the observation (or the call) is not the assistant's answer
        ('<tool_call>{"expression": "#### 923"}</tool_call><tool_response>#### 923</tool_response>', 0.0),
        ("<tool_call>#### 923", 0.0),  # an unclosed call runs to the end
    ],
)
def test_scorer_reads_the_assistants_own_answer(response, score):
    result = default_compute_score(st.DATA_SOURCE, response, "923")
    assert result["score"] == result["acc"] == score
    assert result["used_tool"] == float("<tool_call>" in response)


def test_sft_mix_calls_the_tool_mostly_on_products():
    spec = st.CalcSpec()
    problems = generate_splits({"sft": 2000}, 0, draw=lambda rng: st.make_problem(rng, spec))["sft"]
    first_turns = [r for r in st.iter_rows("sft", problems, spec) if r["extra_info"]["turn"] == 0]
    for kind, prob in spec.sft_tool_prob.items():
        rows = [r for r in first_turns if r["extra_info"]["kind"] == kind]
        rate = sum(r["extra_info"]["use_tool"] for r in rows) / len(rows)
        assert abs(rate - prob) < 0.06, (kind, rate)  # ~900 draws each: 3 standard errors ~ 0.04
    direct = [r for r in first_turns if not r["extra_info"]["use_tool"]]
    assert 0.1 < sum(r["extra_info"]["correct"] for r in direct) / len(direct) < 0.3
    # a direct answer works the expression out "by hand": "23*47-158=915\n#### 915"
    worked, final = direct[0]["messages"][-1]["content"].split("\n")
    expression, result = worked.split("=")
    assert final == f"#### {result}" and eval(expression) == problems[direct[0]["extra_info"]["index"]].answer


def test_sft_rows_render_through_the_tool_template_with_a_parseable_call(tool_tokenizer, tmp_path):
    rows = pd.read_parquet(st.write_parquet(tmp_path, SIZES, seed=0)["sft"]).to_dict("records")
    call_row = next(r for r in rows if r["extra_info"]["use_tool"] and r["extra_info"]["turn"] == 0)
    answer_row = next(r for r in rows if r["extra_info"]["use_tool"] and r["extra_info"]["turn"] == 1)
    tools = json.loads(call_row["tools"])
    assert tools == [st.CALCULATOR_SCHEMA]
    text = tool_tokenizer.apply_chat_template(list(answer_row["messages"]), tools=tools, tokenize=False)
    assert text.startswith("<|system|>Tools: calculator(expression)<|end|><|user|>")
    (call,) = parse_hermes(text).calls
    assert call.name == "calculator" and calculator(call.arguments["expression"]) in text
    assert text.endswith(f"<|assistant|>#### {answer_row['messages'][-1]['content'][5:]}<|end|>")
    # every assistant turn is a target: the call row learns the call, the answer row the call and the answer
    dataset = SFTDataset([call_row, answer_row], tool_tokenizer, max_length=256)
    for example, targets in zip(dataset.examples, [["<tool_call>"], ["<tool_call>", "#### "]]):
        spans = [[]]
        for token, label in zip(example["input_ids"], example["labels"]):
            if label != IGNORE_INDEX:
                spans[-1].append(token)
            elif spans[-1]:
                spans.append([])
        spans = [tool_tokenizer.decode(span) for span in spans if span]
        assert [span[: len(t)] for span, t in zip(spans, targets)] == targets and len(spans) == len(targets)
        assert all(span.endswith(tool_tokenizer.eos_token) for span in spans)
    lengths = [len(e["input_ids"]) for e in SFTDataset(rows, tool_tokenizer, max_length=512).examples]
    assert max(lengths) < 256  # well under max_position_embeddings=512


def test_agent_asset_loads_and_its_tokenizer_round_trips_spaces_and_newlines():
    tokenizer = AutoTokenizer.from_pretrained(AGENT_DIR)
    text = 'Tom has 13 apples.\nHe  buys 4 more.\n\n<tool_call>{"expression": "13+4"}</tool_call> #### 17'
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    assert tokenizer.chat_template == TOOL_CHAT_TEMPLATE
    assert tokenizer.get_vocab() == AutoTokenizer.from_pretrained(ASSETS / "tiny_model").get_vocab()
    model = AutoModelForCausalLM.from_pretrained(AGENT_DIR)
    config = model.config
    assert config.hidden_size // config.num_attention_heads == 32 and config.vocab_size == len(tokenizer)
    assert sum(p.numel() for p in model.parameters()) < 5_000_000
