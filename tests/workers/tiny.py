"""A random tiny Qwen2 model and a word-level tokenizer, built offline for worker tests."""

from __future__ import annotations

import os

import torch

VOCAB = ["<pad>", "<eos>", "<unk>"] + [str(d) for d in range(10)] + ["+", "-", "=", "#", "a", "b", "c"]


def build_tiny_model(path: str, seed: int = 0, layers: int = 2) -> str:
    """Save a random Qwen2 (head_dim 32) and its tokenizer under ``path``; returns ``path``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    os.makedirs(path, exist_ok=True)
    vocab = {tok: i for i, tok in enumerate(VOCAB)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    tokenizer.save_pretrained(path)
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(VOCAB),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=1,
    )
    Qwen2ForCausalLM(config).save_pretrained(path)
    return path
