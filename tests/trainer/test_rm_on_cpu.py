"""main_rm end to end on CPU: Bradley-Terry training through Ray, exported as a sequence classifier."""

import os

import torch

from verl_lite.main_rm import load_config, run
from verl_lite.trainer.load import compose_config
from verl_lite.trainer.sft.config import EMBEDDED_DATA
from verl_lite.trainer.sft.preference_pairs import make_wrong_answer, synthetic_preference_rows


def test_wrong_answer_changes_only_the_final_number():
    import numpy as np

    wrong = make_wrong_answer("3+4=7\n#### 7", np.random.default_rng(0))
    assert wrong.startswith("3+4=7\n#### ") and wrong != "3+4=7\n#### 7"
    assert abs(int(wrong.rsplit(" ", 1)[1]) - 7) <= 3


def test_rm_learns_synthetic_pairs_and_exports_a_sequence_classifier(tmp_path, ray_local):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    cfg = compose_config(
        "rm_trainer",
        [
            f"trainer.default_local_dir={tmp_path}/ckpt",
            f"trainer.run_dir={tmp_path}/runs",
            "trainer.logger=[jsonl]",
            "trainer.n_gpus_per_node=2",
            "trainer.total_training_steps=16",
            "trainer.test_freq=-1",
            "data.synthetic_pairs=24",
            "data.val_ratio=0.2",
            "data.train_batch_size=8",
            "data.micro_batch_size_per_gpu=2",
            "optim.lr=3e-3",
        ],
    )
    config = load_config(cfg)
    history = run(config)
    assert len(history) == 16
    assert {"train/accuracy", "train/margin", "val/accuracy", "val/loss"} <= history[-1].keys()

    hf_dir = tmp_path / "ckpt" / "hf"
    model = AutoModelForSequenceClassification.from_pretrained(hf_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    rows = synthetic_preference_rows(os.path.join(EMBEDDED_DATA, "train.parquet"), 24, config.data.seed)

    def score(answer_key):
        texts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r[answer_key]}],
                tokenize=False,
            )
            for r in rows
        ]
        batch = tokenizer(texts, add_special_tokens=False, padding=True, return_tensors="pt")
        with torch.no_grad():
            return model(**batch).logits.squeeze(-1)  # (pairs,)

    accuracy = float((score("chosen") > score("rejected")).float().mean())
    assert accuracy > 0.5, f"exported reward model prefers chosen on only {accuracy:.2f} of the pairs"
