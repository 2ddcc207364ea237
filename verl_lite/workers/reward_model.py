"""The reward-model worker: score whole trajectories with a learned sequence classifier.

A Bradley-Terry reward model (``python -m verl_lite.main_rm`` exports one) is an
``AutoModelForSequenceClassification`` with one label: it reads prompt + response and returns one
scalar, pooled at the sequence's last token. Like verl, the score is stored token-level: the field
``rm_scores`` holds, per trajectory, a response-length row that is zero except for the score on the
last response token. The reward manager then turns rule-based and model scores into the final
``token_level_scores`` (``reward.reward_model.combine``), which the advantage estimators read.

The model is replicated on every worker (inference only, no sharding): fp32 on CPU, bf16 on GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from verl_lite.kv import KVBatchMeta, get_kv_client
from verl_lite.protocol import padded_from_jagged, to_jagged
from verl_lite.single_controller import Dispatch, Worker, register
from verl_lite.trajectory import read_columns, write_columns
from verl_lite.utils.metrics import spread
from verl_lite.workers.batching import rows_of
from verl_lite.workers.sequences import on_last_token, split_micro_batches

# The metrics compute_rm_score hands back: mean, max and min of the model's sequence scores.
RM_SCORE = "critic/rm_score"


def same_vocabulary(a: Any, b: Any) -> bool:
    """True when two tokenizers map every token to the same id (ids can pass between them unchanged)."""
    return a.get_vocab() == b.get_vocab()


def retokenize(
    prompts: Sequence[torch.Tensor], responses: Sequence[torch.Tensor], source: Any, target: Any
) -> list[torch.Tensor]:
    """``source`` token ids of prompt + response re-encoded by ``target`` through the decoded text.

    Special tokens are decoded too, so the policy's chat-template markers reach the reward model as
    text (a reward model trained on another chat template sees the policy's template).
    """
    texts = source.batch_decode(
        [torch.cat([p, r]).tolist() for p, r in zip(prompts, responses)], skip_special_tokens=False
    )
    encoded = target(texts, add_special_tokens=False)["input_ids"]
    return [torch.tensor(ids, dtype=torch.long) for ids in encoded]


class RewardModelWorker(Worker):
    """The ``RewardModel`` role: writes ``rm_scores`` and the final ``token_level_scores`` of trajectories.

    Args:
        config: the ``reward`` config group (``RewardConfig``, dict or OmegaConf node).
        policy_tokenizer_path: folder of the policy's tokenizer, which wrote the stored token ids.
    """

    def __init__(self, config: Any, policy_tokenizer_path: str):
        super().__init__()
        from verl_lite.reward import RewardConfig

        self.config = RewardConfig.from_any(config)
        self.policy_tokenizer_path = policy_tokenizer_path
        self.model = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Load the reward model (eval mode) and both tokenizers; build the reward manager that combines."""
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from verl_lite.reward import build_reward_manager

        rm = self.config.reward_model
        remote = rm.model.trust_remote_code
        self.tokenizer = AutoTokenizer.from_pretrained(rm.model.path, trust_remote_code=remote)
        self.policy_tokenizer = AutoTokenizer.from_pretrained(self.policy_tokenizer_path)
        self.same_tokenizer = same_vocabulary(self.tokenizer, self.policy_tokenizer)
        on_gpu = torch.cuda.is_available()
        self.device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
        model = AutoModelForSequenceClassification.from_pretrained(
            rm.model.path, dtype=torch.bfloat16 if on_gpu else torch.float32, trust_remote_code=remote
        )
        if model.config.num_labels != 1:
            raise ValueError(
                f"reward.reward_model.model.path={rm.model.path!r} has num_labels={model.config.num_labels}; "
                "a reward model needs exactly one (a scalar score), as main_rm exports."
            )
        if model.config.pad_token_id is None:
            # the classifier pools at the last non-pad token, so it must know the pad id
            model.config.pad_token_id = self.tokenizer.pad_token_id or self.tokenizer.eos_token_id
        self.pad_token_id = model.config.pad_token_id
        self.model = model.to(self.device).eval()
        self.manager = build_reward_manager(self.config)
        self.kv = get_kv_client()

    @torch.no_grad()
    def score_sequences(self, rows: Sequence[torch.Tensor]) -> torch.Tensor:
        """Reward of each full sequence of reward-model token ids, micro-batched: (batch,) float32."""
        scores = []
        for cut in split_micro_batches(
            [r.numel() for r in rows], self.config.reward_model.micro_batch_size_per_gpu
        ):
            input_ids, mask = padded_from_jagged(to_jagged([rows[i] for i in cut]), self.pad_token_id)
            logits = self.model(
                input_ids=input_ids.to(self.device), attention_mask=mask.long().to(self.device)
            ).logits  # (mb, 1)
            scores.append(logits[:, 0].float().cpu())
        return torch.cat(scores) if scores else torch.zeros(0)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_DATA)
    def compute_rm_score(self, meta: KVBatchMeta) -> KVBatchMeta:
        """Score ``meta``'s trajectories; write ``rm_scores`` and the combined ``token_level_scores``.

        Reads ``prompts`` and ``responses`` (and the rule-based ``token_level_scores`` and the
        ``response_mask`` when present). Both written fields are response-length rows with the sequence
        score on the last token the model generated (a multi-turn response may end in a tool's tokens).
        Hands back ``critic/rm_score/{mean,max,min}`` metrics.
        """
        if not len(meta):
            return meta
        rule_field = "token_level_scores" if "token_level_scores" in meta.fields else None
        masked = "response_mask" in meta.fields
        wanted = ["prompts", "responses", *([rule_field] if rule_field else [])]
        wanted += ["response_mask"] if masked else []
        td = read_columns(self.kv, meta, wanted)
        prompts, responses = rows_of(td, "prompts"), rows_of(td, "responses")
        if self.same_tokenizer:
            sequences = [torch.cat([p, r]) for p, r in zip(prompts, responses)]
        else:
            sequences = retokenize(prompts, responses, self.policy_tokenizer, self.tokenizer)
        rm = self.score_sequences(sequences)
        rule = [float(row.sum()) for row in rows_of(td, rule_field)] if rule_field else None
        final = self.manager.combine_model_scores(rule, rm.tolist())
        lengths = [int(r.numel()) for r in responses]
        masks = [m.tolist() for m in rows_of(td, "response_mask")] if masked else [None] * len(meta)

        def token_level(scores: list[float]) -> torch.Tensor:
            return to_jagged([on_last_token(n, s, m) for n, s, m in zip(lengths, scores, masks)])

        fields = {"rm_scores": token_level(rm.tolist()), "token_level_scores": token_level(final)}
        write_columns(self.kv, meta.keys, meta.partition_id, fields)
        out = meta.with_fields(fields)
        out.metrics = spread(RM_SCORE, rm)
        return out


__all__ = ["RM_SCORE", "RewardModelWorker", "retokenize", "same_vocabulary"]
