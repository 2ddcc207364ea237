"""SFT tokenization: a loss on every assistant turn, truncation accounting, pre-training mode and dynamic padding."""

from __future__ import annotations

import torch

from tests.data.conftest import chat
from verl_lite.data.sft_dataset import IGNORE_INDEX, SFTDataset, collate_sft, encode_chat

QUESTION = "Tom has 3 apples. He buys 4 more. How many apples does Tom have now?"


def test_chat_labels_mask_the_prompt_and_keep_the_answer(tokenizer):
    example = encode_chat(tokenizer, chat(QUESTION, "3+4=7\n#### 7"), max_length=128)
    prompt = tokenizer.apply_chat_template(chat(QUESTION, "")[:1], tokenize=False, add_generation_prompt=True)
    n_prompt = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    ids, labels = example["input_ids"], example["labels"]
    assert len(ids) == len(labels)
    assert labels[:n_prompt] == [IGNORE_INDEX] * n_prompt
    assert labels[n_prompt:] == ids[n_prompt:]
    # the target is the answer followed by the eos token that ends the assistant turn
    assert tokenizer.decode(ids[n_prompt:]) == "3+4=7\n#### 7<|end|>"
    assert ids[-1] == tokenizer.eos_token_id


CONVERSATION = [
    {"role": "system", "content": "Answer with #### and the number."},
    {"role": "user", "content": QUESTION},
    {"role": "assistant", "content": "3+4=7\n#### 7"},
    {"role": "user", "content": "And if he eats 2?"},
    {"role": "assistant", "content": "7-2=5\n#### 5"},
    {"role": "user", "content": "Thanks."},
]


def masked_spans(ids: list[int], labels: list[int]) -> list[list[int]]:
    """The runs of consecutive target positions (label != -100), in order."""
    spans, current = [], []
    for token, label in zip(ids, labels):
        if label != IGNORE_INDEX:
            current.append(token)
        elif current:
            spans, current = [*spans, current], []
    return spans + ([current] if current else [])


def test_every_assistant_turn_is_a_target_and_nothing_else(tokenizer):
    example = encode_chat(tokenizer, CONVERSATION, max_length=256)
    ids, labels = example["input_ids"], example["labels"]
    # the ids are the template's rendering of the whole chat, unchanged by the span-wise tokenization
    assert tokenizer.decode(ids) == tokenizer.apply_chat_template(CONVERSATION, tokenize=False)
    assert all(label in (token, IGNORE_INDEX) for token, label in zip(ids, labels))
    # each target span decodes to one assistant message and its end-of-turn token; the trailing user
    # turn, the system turn and the generation prompts carry no loss
    spans = [tokenizer.decode(span) for span in masked_spans(ids, labels)]
    assert spans == [m["content"] + tokenizer.eos_token for m in CONVERSATION if m["role"] == "assistant"]


def test_truncation_keeps_the_assistant_turns_that_fit(tokenizer):
    full = encode_chat(tokenizer, CONVERSATION, max_length=256)
    first_turn = tokenizer.apply_chat_template(CONVERSATION[:3], tokenize=False)
    first_turn_end = len(tokenizer(first_turn, add_special_tokens=False)["input_ids"])
    cut = encode_chat(tokenizer, CONVERSATION, max_length=first_turn_end + 2)
    assert cut["input_ids"] == full["input_ids"][: first_turn_end + 2]
    assert len(masked_spans(cut["input_ids"], cut["labels"])) == 1  # the second turn is cut away
    assert encode_chat(tokenizer, CONVERSATION, max_length=5) is None  # only context left


def test_rows_whose_target_is_truncated_away_are_skipped_and_counted(tokenizer):
    long_question = QUESTION + " He buys 4 more." * 20
    rows = [{"messages": chat(QUESTION, "#### 7")}, {"messages": chat(long_question, "#### 87")}]
    dataset = SFTDataset(rows, tokenizer, max_length=40)
    assert len(dataset) == 1 and dataset.num_truncated == 1
    assert len(dataset[0]["input_ids"]) <= 40


def test_pretrain_mode_makes_every_token_a_target(tokenizer):
    dataset = SFTDataset([{"text": "Tom has 3 apples.\n#### 3"}], tokenizer, max_length=64, mode="pretrain")
    example = dataset[0]
    assert example["labels"] == example["input_ids"]
    assert example["input_ids"][-1] == tokenizer.eos_token_id


def test_collate_right_pads_to_the_longest_row_of_the_batch(tokenizer):
    examples = [
        {"input_ids": [5, 6, 7, 8], "labels": [IGNORE_INDEX, IGNORE_INDEX, 7, 8]},
        {"input_ids": [9, 10], "labels": [IGNORE_INDEX, 10]},
    ]
    batch = collate_sft(examples, pad_token_id=tokenizer.pad_token_id)
    pad = tokenizer.pad_token_id
    assert {k: tuple(v.shape) for k, v in batch.items()} == {k: (2, 4) for k in batch}
    assert batch["input_ids"][1].tolist() == [9, 10, pad, pad]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert batch["labels"][1].tolist() == [IGNORE_INDEX, 10, IGNORE_INDEX, IGNORE_INDEX]
    assert batch["input_ids"].dtype == torch.long
