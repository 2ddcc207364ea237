"""Build a small byte-level BPE chat tokenizer from a text corpus, saved so ``AutoTokenizer`` loads it.

Digits are always single tokens (so numbers compose digit by digit) and the byte-level alphabet keeps
every space and newline, so ``decode(encode(text)) == text``. The chat template renders::

    <|user|>question<|end|><|assistant|>answer<|end|>

``<|end|>`` closes every turn and is the eos token, so generation stops where the assistant turn
ends; ``add_generation_prompt=True`` ends the prompt with ``<|assistant|>``. ``<|endoftext|>`` pads
(and is the unk token, never produced by byte-level BPE). There is no bos token.

Why Qwen2's normalizer and pre-tokenizer: for a model folder whose ``config.json`` says ``qwen2``,
``AutoTokenizer`` (transformers 5.x) ignores ``tokenizer_class`` and builds ``Qwen2Tokenizer``, which
rebuilds the pipeline around the saved vocab and merges with exactly these components (and adds
``<|endoftext|>`` when it is missing). Training with the same components makes both load paths
tokenize identically.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

__all__ = ["CHAT_TEMPLATE", "SPECIAL_TOKENS", "build_tokenizer", "save_tokenizer"]

PAD, EOS = "<|endoftext|>", "<|end|>"
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>"]
SPECIAL_TOKENS = [PAD, EOS, *ROLE_TOKENS]
# Qwen2's split: single digits, words with their leading space, punctuation runs, newlines
QWEN2_PRETOKENIZE_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + eos_token }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def build_tokenizer(
    corpus: Iterable[str], vocab_size: int = 512, model_max_length: int = 512
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``corpus`` and wrap it with the chat template.

    Args:
        corpus: training texts (questions and solutions); words frequent in it become one token.
        vocab_size: most tokens, including the 256 byte symbols and the special tokens (training
            stops earlier when no pair is left to merge).
        model_max_length: longest sequence the model takes (its ``max_position_embeddings``).
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD,
        unk_token=PAD,
        eos_token=EOS,
        additional_special_tokens=ROLE_TOKENS,
        chat_template=CHAT_TEMPLATE,
        model_max_length=model_max_length,
        # generation batches are left-padded; SFT collation pads on the right by itself
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, out_dir: str | Path) -> None:
    """``save_pretrained`` plus a ``tokenizer_class`` that ``AutoTokenizer`` honours.

    For a folder whose ``config.json`` says ``qwen2``, ``AutoTokenizer`` otherwise picks
    ``Qwen2Tokenizer``, which replaces the pre-tokenizer with Qwen2's own and breaks round trips.
    """
    tokenizer.save_pretrained(out_dir)
    config_path = Path(out_dir) / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
