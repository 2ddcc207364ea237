"""main_sft end to end on CPU: data-parallel SFT through Ray, loss falls, DP=2 matches DP=1, HF export loads."""

import math
import os

import pandas as pd
import pytest
import torch

from verl_lite.main_sft import load_config, run
from verl_lite.trainer.load import compose_config
from verl_lite.trainer.sft.config import EMBEDDED_DATA, EMBEDDED_MODEL


@pytest.fixture(scope="module")
def small_sft_parquet(tmp_path_factory):
    """24 chat rows of the embedded task (tokenizing all 8,000 would dominate the test time)."""
    path = tmp_path_factory.mktemp("sft_data") / "sft_small.parquet"
    pd.read_parquet(os.path.join(EMBEDDED_DATA, "sft.parquet")).iloc[:24].to_parquet(path)
    return str(path)


def test_sum_token_nll_counts_only_shifted_targets():
    from verl_lite.trainer.sft.losses import sum_token_nll

    # uniform logits over 4 tokens: every target costs log(4); labels [-100, 2, 3] -> 2 targets after the shift
    logits = torch.zeros(1, 3, 4)
    nll, count = sum_token_nll(logits, torch.tensor([[-100, 2, 3]]))
    assert int(count) == 2
    assert float(nll) == pytest.approx(2 * math.log(4))


def test_last_token_rewards_pick_the_last_real_position():
    from verl_lite.trainer.sft.losses import last_token_rewards

    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).unsqueeze(-1)  # (batch, seq, 1)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert last_token_rewards(values, mask).tolist() == [2.0, 6.0]


def sft_config(tmp_path, data_file, *overrides):
    cfg = compose_config(
        "sft_trainer",
        [
            f"data.train_files={data_file}",
            f"trainer.default_local_dir={tmp_path}/ckpt",
            f"trainer.run_dir={tmp_path}/runs",
            "trainer.logger=[jsonl]",
            *overrides,
        ],
    )
    return load_config(cfg)


@pytest.fixture(scope="module")
def small_text_parquet(tmp_path_factory):
    """24 plain-text rows (question and worked answer): new to the chat-tuned model, so its loss starts high."""
    rows = pd.read_parquet(os.path.join(EMBEDDED_DATA, "sft.parquet")).iloc[:24]
    text = [f"{m[0]['content']} {m[1]['content']}" for m in rows["messages"]]
    path = tmp_path_factory.mktemp("pretrain_data") / "text_small.parquet"
    pd.DataFrame({"text": text}).to_parquet(path)
    return str(path)


def test_pretrain_mode_two_workers_loss_falls_and_export_loads(tmp_path, small_text_parquet, ray_8cpu):
    from transformers import AutoModelForCausalLM

    config = sft_config(
        tmp_path,
        small_text_parquet,
        "data.mode=pretrain",
        "trainer.n_gpus_per_node=2",
        "trainer.total_training_steps=8",
        "trainer.test_freq=4",
        "trainer.save_freq=8",
        "data.val_ratio=0.2",
        "data.train_batch_size=8",
        "data.micro_batch_size_per_gpu=2",
        "optim.lr=1e-3",
        "optim.warmup_steps=2",
    )
    history = run(config)
    losses = [h["train/loss"] for h in history]
    assert len(losses) == 8
    # the same 16 training rows are seen four times: the model learns their format
    assert sum(losses[-2:]) < 0.7 * sum(losses[:2])
    assert "val/loss" in history[3] and "val/loss" in history[-1]
    assert history[-1]["train/lr"] < history[3]["train/lr"]  # cosine decay after warmup
    assert os.path.isdir(tmp_path / "ckpt" / "global_step_8")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt" / "hf")
    assert model.config.vocab_size == AutoModelForCausalLM.from_pretrained(EMBEDDED_MODEL).config.vocab_size


def reference_one_step(data_file, rows, lr):
    """One AdamW step of the plain (unsharded, single-process) model on ``rows`` chat rows: the DP=1 numerics."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl_lite.data.sft_dataset import SFTDataset, collate_sft
    from verl_lite.trainer.sft.losses import sum_token_nll

    tokenizer = AutoTokenizer.from_pretrained(EMBEDDED_MODEL)
    examples = SFTDataset.from_parquet(data_file, tokenizer, 128).examples[:rows]
    batch = collate_sft(examples, tokenizer.pad_token_id)
    model = AutoModelForCausalLM.from_pretrained(EMBEDDED_MODEL, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    nll, count = sum_token_nll(logits, batch["labels"])
    loss = nll / count
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e6)
    optimizer.step()
    return float(loss.detach()), float(grad_norm), {k: v.detach() for k, v in model.state_dict().items()}


def test_sft_dp2_step_matches_single_process_step(tmp_path, small_sft_parquet, ray_8cpu):
    from safetensors.torch import load_file

    lr = 4e-6
    config = sft_config(
        tmp_path,
        small_sft_parquet,
        "trainer.n_gpus_per_node=2",
        "trainer.total_training_steps=1",
        "data.val_ratio=0",
        "data.shuffle=false",
        "data.train_batch_size=8",
        "data.micro_batch_size_per_gpu=2",  # 2 ranks x 2 accumulated micro-batches of 2 rows
        # Adam's first step is about lr * sign(grad): a small lr bounds a sign flip of a
        # near-zero gradient to 2 * lr; grad_norm below checks the gradient itself.
        f"optim.lr={lr}",
        "optim.lr_scheduler=constant",
        "optim.warmup_steps=0",
        "optim.grad_clip=1e6",
    )
    (metrics,) = run(config)
    weights = load_file(tmp_path / "ckpt" / "hf" / "model.safetensors")
    ref_loss, ref_grad_norm, ref_weights = reference_one_step(small_sft_parquet, 8, lr)
    # token-mean over the global mini-batch: same loss and gradient as one process on all 8 rows
    assert metrics["train/loss"] == pytest.approx(ref_loss, rel=1e-5)
    assert metrics["train/grad_norm"] == pytest.approx(ref_grad_norm, rel=1e-4)
    assert metrics["train/num_units"] > 0
    for name, tensor in weights.items():
        torch.testing.assert_close(tensor, ref_weights[name], atol=1e-5, rtol=0)
    assert "model.embed_tokens.weight" in weights
