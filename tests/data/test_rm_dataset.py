"""Preference pairs: both row forms, identical-pair dropping and separate padding of the two sides."""

from __future__ import annotations

from tests.data.conftest import chat
from verl_lite.data.rm_dataset import PreferenceDataset, collate_preference, pair_messages

QUESTION = "Anna has 5 coins. She loses 2. How many coins does Anna have now?"


def test_string_form_and_conversation_form_give_the_same_pair():
    string_row = {"prompt": QUESTION, "chosen": "#### 3", "rejected": "#### 4"}
    conversation_row = {"chosen": chat(QUESTION, "#### 3"), "rejected": chat(QUESTION, "#### 4")}
    assert pair_messages(string_row) == pair_messages(conversation_row)


def test_pairs_identical_after_truncation_are_dropped_and_counted(tokenizer):
    long_question = QUESTION + " She loses 2." * 30
    rows = [
        {"prompt": QUESTION, "chosen": "5-2=3\n#### 3", "rejected": "#### 4"},
        {"prompt": long_question, "chosen": "#### 1", "rejected": "#### 2"},  # answers cut off
    ]
    dataset = PreferenceDataset(rows, tokenizer, max_length=48)
    assert len(dataset) == 1 and dataset.num_identical_dropped == 1


def test_collate_pads_chosen_and_rejected_separately(tokenizer):
    pairs = [
        {"chosen_input_ids": [1, 2, 3], "rejected_input_ids": [1, 2]},
        {"chosen_input_ids": [4], "rejected_input_ids": [4, 5, 6, 7]},
    ]
    batch = collate_preference(pairs, pad_token_id=0)
    assert batch["chosen_input_ids"].tolist() == [[1, 2, 3], [4, 0, 0]]
    assert batch["chosen_attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["rejected_input_ids"].shape == (2, 4)
    assert batch["rejected_attention_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
