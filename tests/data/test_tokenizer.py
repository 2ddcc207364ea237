"""The synthetic-task tokenizer: lossless round trips, digit tokens, chat template, AutoTokenizer loading."""

from __future__ import annotations

from transformers import AutoTokenizer, Qwen2Config

from tests.data.conftest import chat
from verl_lite.data.tokenizer import save_tokenizer

TEXT = "Tom has 13 apples.\nHe  buys 4 more\tand 2!\n\n#### 19 (café)"


def test_encode_decode_keeps_spaces_newlines_and_unseen_characters(tokenizer):
    ids = tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == TEXT


def test_every_digit_is_its_own_token(tokenizer):
    tokens = tokenizer.convert_ids_to_tokens(tokenizer("=1234", add_special_tokens=False)["input_ids"])
    assert tokens == ["=", "1", "2", "3", "4"]


def test_generation_prompt_ends_where_the_answer_starts(tokenizer):
    messages = chat("Tom has 3 apples. How many apples does Tom have now?", "#### 3")
    prompt = tokenizer.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template(messages, tokenize=False)
    assert prompt.endswith("<|end|><|assistant|>")
    assert full == prompt + "#### 3" + tokenizer.eos_token
    assert tokenizer.pad_token == "<|endoftext|>" and tokenizer.pad_token_id != tokenizer.eos_token_id


def test_autotokenizer_on_a_qwen2_folder_tokenizes_like_the_original(tokenizer, tmp_path):
    # AutoTokenizer picks Qwen2Tokenizer for model_type qwen2; it must not change a single id
    Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, num_attention_heads=1).save_pretrained(tmp_path)
    save_tokenizer(tokenizer, tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    rendered = tokenizer.apply_chat_template(chat(TEXT, "1+2=3\n#### 3"), tokenize=False)
    assert loaded(rendered)["input_ids"] == tokenizer(rendered)["input_ids"]
    assert loaded.decode(loaded(TEXT)["input_ids"]) == TEXT
    assert len(loaded) == len(tokenizer)
    assert (loaded.pad_token, loaded.eos_token) == (tokenizer.pad_token, tokenizer.eos_token)
