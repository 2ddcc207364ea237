"""A few dozen SFT steps of a tiny Qwen2 (from config) on the synthetic task lower the loss."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader
from transformers import Qwen2Config, Qwen2ForCausalLM

from verl_lite.data.sft_dataset import SFTDataset, collate_sft
from verl_lite.data.synthetic import generate_splits, sft_row


def test_sft_loss_falls_on_the_synthetic_task(tokenizer):
    torch.manual_seed(0)
    problems = generate_splits({"sft": 240}, seed=2)["sft"]
    dataset = SFTDataset([sft_row(p, "sft", i) for i, p in enumerate(problems)], tokenizer, max_length=96)
    pad_id = tokenizer.pad_token_id
    loader = DataLoader(dataset, batch_size=8, shuffle=True, collate_fn=lambda b: collate_sft(b, pad_id))
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=1, num_key_value_heads=1, tie_word_embeddings=True,
    )  # fmt: skip
    model = Qwen2ForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for batch in loader:  # 30 steps
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    # starts near log(vocab) ~ 6; learning the answer template alone more than halves it
    assert losses[0] > 5.0 and sum(losses[-5:]) / 5 < 0.5 * losses[0]
