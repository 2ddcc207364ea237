"""Rollout with Hugging Face ``generate``: left-padded batches, sampling, EOS stop, sampled-token log-probs."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from verl_lite.workers.config import RolloutConfig, SamplingConfig
from verl_lite.workers.lora import merge_adapters
from verl_lite.workers.rollout.base import Generation, RolloutBackend, register_rollout
from verl_lite.workers.sequences import log_probs_of


@register_rollout("hf")
class HFRollout(RolloutBackend):
    """A full (unsharded) copy of the policy in this process, generating with ``model.generate``.

    It does not sleep (``supports_sleep`` is False): its KV cache lives only inside each ``generate``
    call, and the weights stay so that the in-place sync can copy into them.
    """

    def __init__(self, model_path: str, config: RolloutConfig, eos_token_id, pad_token_id: int):
        from transformers import AutoModelForCausalLM

        super().__init__(model_path, config, eos_token_id, pad_token_id)
        self.device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
        dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(self.device).eval()
        # Unmerged copies of the weights LoRA adapters add to, taken when the first adapter arrives.
        self._lora_base: dict[str, torch.Tensor] = {}

    @torch.no_grad()
    def generate(
        self, prompts: list[torch.Tensor], sampling: SamplingConfig, max_tokens: int
    ) -> list[Generation]:
        results: list[Generation] = []
        step = max(1, self.config.micro_batch_size)
        for start in range(0, len(prompts), step):
            results.extend(self._generate_batch(prompts[start : start + step], start, sampling, max_tokens))
        return results

    def _generate_batch(
        self, prompts: list[torch.Tensor], offset: int, sampling: SamplingConfig, max_tokens: int
    ) -> list[Generation]:
        width = max(int(p.numel()) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for i, prompt in enumerate(prompts):
            input_ids[i, width - prompt.numel() :] = prompt
            attention_mask[i, width - prompt.numel() :] = 1
        greedy = not sampling.do_sample or sampling.temperature <= 0
        kwargs = (
            {"do_sample": False}
            if greedy
            else {
                "do_sample": True,
                "temperature": sampling.temperature,
                "top_p": sampling.top_p,
                "top_k": sampling.top_k if sampling.top_k and sampling.top_k > 0 else None,
            }
        )
        out = self.model.generate(
            input_ids=input_ids.to(self.device),
            attention_mask=attention_mask.to(self.device),
            max_new_tokens=max_tokens,
            # greedy samples of one prompt are identical: decode once, copy below
            num_return_sequences=1 if greedy else sampling.n,
            eos_token_id=self.eos_token_ids,
            pad_token_id=self.pad_token_id,
            return_dict_in_generate=True,
            output_logits=True,
            **kwargs,
        )
        tokens = out.sequences[:, width:].cpu()
        logits = torch.stack(out.logits, dim=1).float().cpu()  # (rows, new_tokens, vocab), raw logits
        temperature = 1.0 if greedy else sampling.temperature
        log_probs = log_probs_of(logits, tokens, temperature)
        if greedy and sampling.n > 1:
            tokens, log_probs = (
                tokens.repeat_interleave(sampling.n, 0),
                log_probs.repeat_interleave(sampling.n, 0),
            )
        generations = []
        for row in range(tokens.shape[0]):
            length, reason = self.cut_at_eos(tokens[row], max_tokens)
            generations.append(
                Generation(
                    prompt_index=offset + row // sampling.n,
                    sample_index=row % sampling.n,
                    response_ids=tokens[row, :length].clone(),
                    log_probs=log_probs[row, :length].clone(),
                    finish_reason=reason,
                )
            )
        return generations

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy full weights in place; LoRA adapters (``lora_A``/``lora_B`` pairs) are merged into the base first."""
        params = self.model.state_dict(keep_vars=True)  # includes tied names such as lm_head.weight
        for name, tensor in merge_adapters(named_tensors, self._base_weight):
            target = params.get(name)
            if target is None:
                raise KeyError(
                    f"rollout model has no parameter {name!r} (weights come from a different model?)."
                )
            target.copy_(tensor.to(device=target.device, dtype=target.dtype))

    def _base_weight(self, name: str) -> torch.Tensor:
        if name not in self._lora_base:
            self._lora_base[name] = self.model.state_dict()[name].detach().clone()
        return self._lora_base[name]

    @torch.no_grad()
    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return (
            self.model(input_ids=input_ids.to(self.device), attention_mask=attention_mask.to(self.device))
            .logits.float()
            .cpu()
        )
