"""RLHFDataset (templating, filtering, truncation, skipped rows) and resumable PromptBatches."""

import json
import logging

import pytest

from verl_lite.data.rl_dataset import PromptBatches, RLHFDataset, row_uid

SPECIALS = ["<|pad|>", "<|unk|>", "<|end|>", "<|user|>", "<|assistant|>", "<|system|>"]
WORDS = ["Tom", "has", "3", "apples", "how", "many", "?", "be", "brief", "a", "b", "c", "d", "e", "f"]
# one token per whitespace-separated word; a one-turn prompt "w1 .. wk" is k + 3 tokens:
# <|user|> w1 .. wk <|end|> <|assistant|>
TEMPLATE = (
    "{% for m in messages %}{{ '<|' + m['role'] + '|> ' + m['content'] + ' <|end|> ' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(SPECIALS + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<|unk|>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<|pad|>",
        unk_token="<|unk|>",
        eos_token="<|end|>",
        additional_special_tokens=SPECIALS[3:],
        chat_template=TEMPLATE,
    )


def row(prompt, answer="3", **extra):
    return {
        "data_source": "synthetic_arith",
        "prompt": prompt,
        "reward_model": {"ground_truth": answer},
        **extra,
    }


def chat(text):
    return [{"role": "user", "content": text}]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_items_carry_templated_prompt_ids_and_reward_fields(tmp_path, tokenizer):
    path = write_jsonl(
        tmp_path / "d.jsonl", [row(chat("Tom has 3 apples"), extra_info={"k": 1}), row("how many ?")]
    )
    dataset = RLHFDataset(path, tokenizer, max_prompt_length=16)
    first, second = dataset[0], dataset[1]
    assert first["raw_prompt"] == "<|user|> Tom has 3 apples <|end|> <|assistant|>"
    assert first["prompt_ids"].tolist() == tokenizer.convert_tokens_to_ids(
        ["<|user|>", "Tom", "has", "3", "apples", "<|end|>", "<|assistant|>"]
    )
    assert first["prompt_ids"].dtype.is_floating_point is False
    assert (first["data_source"], first["ground_truth"], first["extra_info"], first["index"]) == (
        "synthetic_arith",
        "3",
        {"k": 1},
        0,
    )
    # a plain string prompt becomes one user message
    assert second["raw_prompt"] == "<|user|> how many ? <|end|> <|assistant|>" and second["extra_info"] == {}
    assert second["row"]["prompt"] == "how many ?"


def test_default_data_source_fills_missing_column(tokenizer):
    rows = [{"prompt": "a", "reward_model": {"ground_truth": 1}}]
    assert (
        RLHFDataset(None, tokenizer, rows=rows, default_data_source="openai/gsm8k")[0]["data_source"]
        == "openai/gsm8k"
    )


def test_overlong_prompts_are_filtered_and_counted(tokenizer):
    # lengths: "a" -> 4 tokens, "a b c" -> 6, "a b c d e" -> 8; limit 6
    rows = [row("a"), row("a b c d e"), row("a b c"), row("a b c d e f")]
    dataset = RLHFDataset(None, tokenizer, rows=rows, max_prompt_length=6, filter_overlong_prompts=True)
    assert [item["index"] for item in dataset.examples] == [0, 2]
    assert dataset.skipped["overlong_prompt"]["count"] == 2
    assert dataset.skipped["overlong_prompt"]["first_index"] == 1


def test_truncation_error_names_row_length_and_limit(tokenizer):
    rows = [row("a"), row("a b c d e")]
    with pytest.raises(ValueError, match=r"row 1: prompt is 8 tokens, above data.max_prompt_length=6"):
        RLHFDataset(None, tokenizer, rows=rows, max_prompt_length=6)


@pytest.mark.parametrize(
    ("mode", "tokens"),
    [
        ("left", ["c", "d", "e", "<|end|>", "<|assistant|>"]),  # keeps the end (the generation prompt)
        ("right", ["<|user|>", "a", "b", "c", "d"]),
    ],
)
def test_truncation_left_and_right(tokenizer, mode, tokens):
    dataset = RLHFDataset(None, tokenizer, rows=[row("a b c d e")], max_prompt_length=5, truncation=mode)
    item = dataset[0]
    assert item["prompt_ids"].tolist() == tokenizer.convert_tokens_to_ids(tokens)
    assert item["raw_prompt"] == " ".join(tokens) and dataset.num_truncated == 1


def test_bad_rows_are_skipped_and_reported_once(tokenizer, caplog):
    rows = [
        row("a"),
        {"data_source": "x", "reward_model": {"ground_truth": "1"}},  # no prompt
        row("b", answer=None),  # no ground truth
        {"prompt": "c"},  # no reward_model at all
        row([{"content": "no role"}]),  # malformed messages
        row(""),  # empty prompt
    ]
    with caplog.at_level(logging.WARNING, logger="verl_lite.data.rl_dataset"):
        dataset = RLHFDataset(None, tokenizer, rows=rows)
    assert len(dataset) == 1
    assert {k: v["count"] for k, v in dataset.skipped.items()} == {
        "missing_prompt": 2,
        "missing_ground_truth": 2,
        "invalid_prompt": 1,
    }
    assert dataset.skipped["missing_ground_truth"]["first_row"]["prompt"] == "b"
    records = [r.getMessage() for r in caplog.records]
    assert len(records) == 1 and "kept 1 of 6 rows" in records[0] and "first: row 1" in records[0]


def test_options_are_validated(tokenizer):
    with pytest.raises(ValueError, match="data.truncation='middle'"):
        RLHFDataset(None, tokenizer, rows=[row("a")], truncation="middle")


class Rows:
    """A stand-in dataset: item i is {"index": i}."""

    split = "train"

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"index": i}


def indices(batch):
    return [item["index"] for item in batch]


def test_prompt_batches_cover_each_epoch_once_then_reshuffle():
    batches = PromptBatches(Rows(10), batch_size=3, seed=7)
    assert len(batches) == 3  # 10 // 3, the last row of each epoch is dropped
    epoch0 = [indices(next(batches)) for _ in range(3)]
    epoch1 = [indices(next(batches)) for _ in range(3)]
    flat0, flat1 = sum(epoch0, []), sum(epoch1, [])
    assert len(set(flat0)) == 9 and len(set(flat1)) == 9 and flat0 != flat1
    assert batches.epoch == 1


def test_prompt_batches_state_round_trip_gives_the_same_next_batch():
    batches = PromptBatches(Rows(10), batch_size=4, seed=3)
    for _ in range(3):  # into epoch 1 (2 batches per epoch)
        next(batches)
    state = batches.state_dict()
    assert state == {"epoch": 1, "position": 4, "seed": 3, "shuffle": True, "num_rows": 10}
    expected = [next(batches) for _ in range(3)]
    resumed = PromptBatches(Rows(10), batch_size=4, seed=999)
    resumed.load_state_dict(state)
    assert [indices(next(resumed)) for _ in range(3)] == [indices(b) for b in expected]
    assert [b[0]["uid"] for b in expected] == [f"train-{b[0]['epoch']}-{b[0]['index']}" for b in expected]


def test_prompt_batches_resume_rejects_a_different_dataset():
    state = PromptBatches(Rows(10), batch_size=4).state_dict()
    with pytest.raises(ValueError, match="10 rows.*now has 9"):
        PromptBatches(Rows(9), batch_size=4).load_state_dict(state)


def test_prompt_batches_without_shuffle_keep_file_order_and_skip_the_short_last_batch():
    batches = PromptBatches(Rows(5), batch_size=2, shuffle=False)
    assert [indices(next(batches)) for _ in range(4)] == [[0, 1], [2, 3], [0, 1], [2, 3]]
    assert batches.epoch == 1


def test_prompt_batches_uids_are_unique_per_draw():
    batches = PromptBatches(Rows(4), batch_size=2, seed=0)
    uids = [item["uid"] for _ in range(4) for item in next(batches)]
    assert len(set(uids)) == 8 and row_uid("train", 1, 2) in uids


def test_prompt_batches_need_a_full_batch():
    with pytest.raises(ValueError, match="3 rows cannot fill one batch of 4"):
        PromptBatches(Rows(3), batch_size=4)


def test_prompt_batches_over_the_real_dataset(tokenizer):
    dataset = RLHFDataset(None, tokenizer, rows=[row("a"), row("b"), row("c")], split="val")
    batch = next(PromptBatches(dataset, batch_size=2, shuffle=False))
    assert [item["uid"] for item in batch] == ["val-0-0", "val-0-1"] and batch[0]["prompt_ids"].ndim == 1
