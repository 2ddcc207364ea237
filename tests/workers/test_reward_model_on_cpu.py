"""The reward-model worker scores stored trajectories exactly like a direct sequence-classifier forward."""

import os

import pytest
import torch
from tensordict import TensorDict

from tests.workers.helpers import PROMPTS, RESPONSES, jagged, make_workers, put_trajectories, release
from verl_lite.single_controller.ray import RayClassWithInitArgs
from verl_lite.utils.metrics import reduce_metrics
from verl_lite.workers.reward_model import RewardModelWorker

RULE_SCORES = [1.0, 0.0, 1.0, 0.0]
SHIPPED_MODEL = os.path.join(os.path.dirname(__file__), "..", "..", "verl_lite", "assets", "tiny_model")


def build_reward_model(path: str, tokenizer_dir: str) -> str:
    """A random one-label Qwen2 sequence classifier saved with the tokenizer of ``tokenizer_dir``."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForSequenceClassification(config)
    with torch.no_grad():
        model.score.weight.normal_(0.0, 1.0)  # spread the scores so a mix-up of rows would show
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def direct_scores(rm_dir: str, policy_dir: str) -> torch.Tensor:
    """Each trajectory decoded to text, encoded by the RM's tokenizer, scored alone (no padding)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    policy_tok, rm_tok = AutoTokenizer.from_pretrained(policy_dir), AutoTokenizer.from_pretrained(rm_dir)
    model = AutoModelForSequenceClassification.from_pretrained(rm_dir, dtype=torch.float32).eval()
    scores = []
    for prompt, response in zip(PROMPTS, RESPONSES):
        text = policy_tok.decode(prompt + response, skip_special_tokens=False)
        ids = torch.tensor([rm_tok(text, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            scores.append(float(model(input_ids=ids).logits[0, 0]))
    return torch.tensor(scores)


def score_with_group(kv, rm_dir: str, policy_dir: str, combine: str, micro_batch: int, masks=None):
    meta = put_trajectories(kv)
    if masks is not None:  # multi-turn responses: 0 on tool/observation tokens
        kv.kv_batch_put(meta.keys, "train", fields=TensorDict({"response_mask": jagged(masks)}, [4]))
        meta.fields = sorted({*meta.fields, "response_mask"})
    rule = [torch.tensor([0.0] * (len(r) - 1) + [s]) for r, s in zip(RESPONSES, RULE_SCORES)]
    kv.kv_batch_put(
        meta.keys,
        "train",
        fields=TensorDict({"token_level_scores": torch.nested.nested_tensor(rule, layout=torch.jagged)}, [4]),
    )
    meta.fields = sorted({*meta.fields, "token_level_scores"})
    reward = {"reward_model": {"enable": True, "combine": combine, "micro_batch_size_per_gpu": micro_batch}}
    reward["reward_model"]["model"] = {"path": rm_dir}
    group = make_workers(
        "rm", RayClassWithInitArgs(RewardModelWorker, config=reward, policy_tokenizer_path=policy_dir), 2
    )
    try:
        group.init_model()
        out = group.compute_rm_score(meta)
        # read while the workers live: they wrote the scores, and rows live as long as their writer
        td = kv.kv_batch_get(out.keys, "train", select_fields=["rm_scores", "token_level_scores"])
    finally:
        release(group)
    return out, td


def test_rm_scores_equal_a_direct_forward_with_the_policy_tokenizer(tiny_model_dir, kv_store, tmp_path):
    rm_dir = build_reward_model(str(tmp_path / "rm"), tiny_model_dir)
    expected = direct_scores(rm_dir, tiny_model_dir)
    # two rows per worker in one micro-batch: rank 1's rows differ in length, so padding is exercised.
    # Row 3's response ends in two observation tokens (mask 0): its score goes on its last model token.
    masks = [[1] * len(r) for r in RESPONSES]
    masks[3][-2:] = [0, 0]
    last = [len(r) - 1 for r in RESPONSES]
    last[3] -= 2
    out, td = score_with_group(kv_store, rm_dir, tiny_model_dir, "replace", micro_batch=2, masks=masks)
    rm_rows = list(td["rm_scores"].unbind())
    assert [r.numel() for r in rm_rows] == [len(r) for r in RESPONSES]
    # the score sits on the last model token, zeros elsewhere
    for row, at in zip(rm_rows, last):
        assert float(row.abs().sum() - row[at].abs()) == 0.0
    got = torch.stack([r[at] for r, at in zip(rm_rows, last)])
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    # replace: the final scores are the model's, the rule scores are gone
    final = torch.stack([r[at] for r, at in zip(td["token_level_scores"].unbind(), last)])
    torch.testing.assert_close(final, expected, atol=1e-5, rtol=1e-5)
    assert {"rm_scores", "token_level_scores"} <= set(out.fields)
    assert reduce_metrics([out.metrics])["critic/rm_score/mean"] == pytest.approx(
        float(expected.mean()), abs=1e-5
    )


def test_other_tokenizer_rescores_decoded_text_and_add_keeps_the_rule_score(
    tiny_model_dir, kv_store, tmp_path
):
    # the shipped byte-level BPE tokenizer shares no vocabulary with the word-level test tokenizer
    rm_dir = build_reward_model(str(tmp_path / "rm_bpe"), SHIPPED_MODEL)
    expected = direct_scores(rm_dir, tiny_model_dir)
    _, td = score_with_group(kv_store, rm_dir, tiny_model_dir, "add", micro_batch=1)
    got = torch.stack([r[-1] for r in td["rm_scores"].unbind()])
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    final = torch.stack([r[-1] for r in td["token_level_scores"].unbind()])
    torch.testing.assert_close(final, expected + torch.tensor(RULE_SCORES), atol=1e-5, rtol=1e-5)
