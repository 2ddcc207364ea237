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


def test_pretrain_mode_two_workers_loss_falls_and_export_loads(tmp_path, small_text_parquet, ray_local):
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
    examples = SFTDataset(pd.read_parquet(data_file).to_dict("records"), tokenizer, 128).examples[:rows]
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


def test_sft_dp2_step_matches_single_process_step(tmp_path, small_sft_parquet, ray_local):
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


@pytest.fixture(scope="module")
def two_turn_parquet(tmp_path_factory):
    """12 two-turn conversations: the embedded task's chat rows joined in pairs (q1, a1, q2, a2)."""
    rows = [
        list(m) for m in pd.read_parquet(os.path.join(EMBEDDED_DATA, "sft.parquet")).iloc[:24]["messages"]
    ]
    path = tmp_path_factory.mktemp("two_turn") / "two_turn.parquet"
    pd.DataFrame({"messages": [[*rows[2 * i], *rows[2 * i + 1]] for i in range(12)]}).to_parquet(path)
    return str(path)


MULTI_TURN_LORA_PACKED = (
    "trainer.nnodes=2",
    "trainer.n_gpus_per_node=1",
    "model.lora_rank=8",
    "model.lora_alpha=16",
    "model.target_modules=[q_proj,v_proj]",
    "model.lora_dropout=0.0",
    "model.use_remove_padding=true",
    "data.use_dynamic_bsz=true",
    "data.max_token_len_per_gpu=160",  # two-turn rows are 69-111 tokens: one or two rows per micro-batch
    "data.val_ratio=0",
    "data.train_batch_size=4",
    "data.micro_batch_size_per_gpu=2",
    "trainer.total_training_steps=5",  # 3 steps per epoch: the resumed run crosses into epoch 1
    "trainer.test_freq=0",
    "trainer.save_freq=1",
    "trainer.max_ckpt_to_keep=3",
    "trainer.resume_mode=auto",
    "optim.lr=1e-2",
)


def first_batch_reference(data_file, config):
    """Step 1's token-mean loss, target count and per-rank micro-batch count, from the plain padded HF model.

    LoRA's B matrices start at zero, so the adapted model's first forward is the base model's.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl_lite.data.sft_dataset import SFTDataset, collate_sft
    from verl_lite.trainer.sft.data import epoch_batches
    from verl_lite.trainer.sft.losses import sum_token_nll
    from verl_lite.workers.sequences import split_micro_batches

    tokenizer = AutoTokenizer.from_pretrained(EMBEDDED_MODEL)
    examples = SFTDataset(pd.read_parquet(data_file).to_dict("records"), tokenizer, 128).examples
    data = config.data
    rows = [examples[i] for i in epoch_batches(len(examples), data.train_batch_size, True, data.seed, 0)[0]]
    batch = collate_sft(rows, tokenizer.pad_token_id)
    model = AutoModelForCausalLM.from_pretrained(EMBEDDED_MODEL, dtype=torch.float32)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    nll, count = sum_token_nll(logits, batch["labels"])
    lengths = [len(r["input_ids"]) for r in rows]
    # DP_COMPUTE_DATA gives rank 0 the first half of the rows, rank 1 the second; both run the larger count
    cuts = [
        split_micro_batches(part, max_token_len=data.max_token_len_per_gpu)
        for part in (lengths[:2], lengths[2:])
    ]
    return float(nll / count), int(count), 2 * max(len(c) for c in cuts)


def test_multi_turn_lora_packed_two_nodes_resumes_to_the_digit(tmp_path, two_turn_parquet, ray_local):
    import json
    import shutil

    from safetensors.torch import load_file

    config = sft_config(tmp_path, two_turn_parquet, *MULTI_TURN_LORA_PACKED)
    full = run(config)
    assert [h["step"] for h in full] == [1, 2, 3, 4, 5]
    # step 1 through packing, a token budget, LoRA and two "nodes" is the padded single-process loss over
    # every assistant turn of the batch's four conversations
    ref_loss, ref_targets, ref_micro = first_batch_reference(two_turn_parquet, config)
    assert full[0]["train/loss"] == pytest.approx(ref_loss, rel=1e-5)
    assert full[0]["train/num_units"] == ref_targets
    assert full[0]["train/num_micro_batches"] == ref_micro
    assert full[-1]["train/loss"] < 0.8 * full[0]["train/loss"]
    ckpt = tmp_path / "ckpt"
    assert sorted(p.name for p in ckpt.glob("global_step_*")) == [f"global_step_{s}" for s in (3, 4, 5)]
    adapter = json.loads(
        (ckpt / "global_step_5" / "actor" / "huggingface" / "adapter_config.json").read_text()
    )
    assert adapter["r"] == 8 and sorted(adapter["target_modules"]) == ["q_proj", "v_proj"]
    merged = load_file(ckpt / "hf" / "model.safetensors")
    base = load_file(os.path.join(EMBEDDED_MODEL, "model.safetensors"))
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(merged[q], base[q])  # the adapters are merged into the export
    assert torch.equal(merged["model.layers.0.mlp.up_proj.weight"], base["model.layers.0.mlp.up_proj.weight"])

    # a run killed after step 3 leaves global_step_3 as its newest checkpoint; resume_mode=auto continues it
    for step in (4, 5):
        shutil.rmtree(ckpt / f"global_step_{step}")
    resumed = run(sft_config(tmp_path, two_turn_parquet, *MULTI_TURN_LORA_PACKED))
    assert [h["step"] for h in resumed] == [4, 5]
    # same rows, weights, AdamW moments, schedule and RNG, the same fp32 operations in the same order
    # on CPU: the losses agree to the last bit, not just within a tolerance
    for before, after in zip(full[3:], resumed):
        for key in ("train/loss", "train/grad_norm", "train/lr", "train/loss_ema"):
            assert after[key] == before[key], (key, before[key], after[key])
    logged = [json.loads(line)["step"] for line in (tmp_path / "runs" / "sft_tiny" / "metrics.jsonl").open()]
    assert [s for s in logged if s > 0] == [1, 2, 3, 4, 5]  # the resumed run replaced what came after step 3


def test_resume_from_an_incomplete_checkpoint_fails_before_ray(tmp_path, small_sft_parquet):
    bad = tmp_path / "ckpt" / "global_step_2"
    bad.mkdir(parents=True)
    config = sft_config(
        tmp_path, small_sft_parquet, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={bad}"
    )
    with pytest.raises(ValueError, match="trainer.resume_from_path=.* is not a complete checkpoint"):
        run(config)


@pytest.mark.parametrize(
    "override, message",
    [
        ("trainer.nnodes=0", "trainer.nnodes=0 must be >= 1"),
        ("trainer.resume_mode=latest", "trainer.resume_mode='latest' is not valid"),
        ("model.lora_rank=-1", "model.lora_rank=-1 must be a non-negative integer"),
        ("data.max_token_len_per_gpu=0", "data.max_token_len_per_gpu=0 must be >= 1"),
    ],
)
def test_bad_sft_settings_are_refused_in_one_sentence(tmp_path, small_sft_parquet, override, message):
    extra = ("data.use_dynamic_bsz=true",) if "token_len" in override else ()
    with pytest.raises(ValueError, match=message):
        sft_config(tmp_path, small_sft_parquet, override, *extra)
