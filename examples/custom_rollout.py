"""A custom rollout backend: a plain token-by-token sampling loop, registered as ``plain``.

It shows the whole ``RolloutBackend`` contract in one screen: ``generate`` turns prompt token ids
into ``Generation``s (response ids, their log-probs, why sampling stopped) and ``load_weights``
takes the actor's weights after every step. Select it by name (the file is imported in every
process, so the rollout workers find the registration)::

    python -m verl_lite.main_ppo trainer.extensions=[examples/custom_rollout.py] \\
        actor_rollout_ref.rollout.name=plain

Set ``PLAIN_ROLLOUT_LOG`` to a file path and every ``generate`` call appends one JSON line (pid,
prompts, n, samples, new tokens, weight version) to it; on a cluster pass it to the workers with
``+ray_kwargs.ray_init.runtime_env.env_vars.PLAIN_ROLLOUT_LOG=/path/rollout.jsonl``.

Run this file to check it against the built-in ``hf`` backend (same greedy tokens and log-probs).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable

import torch

from verl_lite.workers.config import RolloutConfig, SamplingConfig
from verl_lite.workers.rollout import Generation, RolloutBackend, register_rollout

LOG_ENV = "PLAIN_ROLLOUT_LOG"


@register_rollout("plain")
class PlainLoopRollout(RolloutBackend):
    """Samples each prompt's ``n`` responses as one batch, one token at a time, with a KV cache."""

    def __init__(self, model_path: str, config: RolloutConfig, eos_token_id, pad_token_id: int):
        from transformers import AutoModelForCausalLM

        super().__init__(model_path, config, eos_token_id, pad_token_id)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()

    @torch.no_grad()
    def generate(
        self, prompts: list[torch.Tensor], sampling: SamplingConfig, max_tokens: int
    ) -> list[Generation]:
        if sampling.do_sample and sampling.top_p < 1.0:
            raise ValueError(
                f"rollout.name=plain samples without nucleus cut; got top_p={sampling.top_p}, use 1.0."
            )
        out = []
        for index, prompt in enumerate(prompts):
            tokens, log_probs = self._sample(prompt, sampling, max_tokens)
            for sample in range(sampling.n):
                length, reason = self.cut_at_eos(tokens[sample], max_tokens)
                out.append(
                    Generation(index, sample, tokens[sample, :length], log_probs[sample, :length], reason)
                )
        self._log(len(prompts), sampling.n, out)
        return out

    def _sample(self, prompt: torch.Tensor, sampling: SamplingConfig, max_tokens: int):
        """(n, max_tokens) token ids and their log-probs under softmax(logits / temperature)."""
        greedy = not sampling.do_sample or sampling.temperature <= 0
        temperature = 1.0 if greedy else sampling.temperature
        input_ids = prompt.unsqueeze(0).repeat(sampling.n, 1)  # (n, prompt_len): no padding needed
        past, tokens, log_probs = None, [], []
        finished = torch.zeros(sampling.n, dtype=torch.bool)
        for _ in range(max_tokens):
            result = self.model(input_ids=input_ids, past_key_values=past, use_cache=True)
            past = result.past_key_values
            logits = result.logits[:, -1].float() / temperature  # (n, vocab)
            if greedy:
                next_token = logits.argmax(dim=-1)
            else:
                if sampling.top_k and sampling.top_k > 0:
                    kth = logits.topk(sampling.top_k, dim=-1).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                next_token = torch.multinomial(logits.softmax(dim=-1), 1).squeeze(-1)
            # the log-prob the actor recomputes: full softmax(logits / temperature), no top-k cut
            full = result.logits[:, -1].float() / temperature
            log_probs.append(full.log_softmax(dim=-1).gather(-1, next_token.unsqueeze(-1)).squeeze(-1))
            tokens.append(next_token)
            finished |= torch.isin(next_token, torch.tensor(self.eos_token_ids))
            if finished.all():
                break
            input_ids = next_token.unsqueeze(-1)
        return torch.stack(tokens, dim=1), torch.stack(log_probs, dim=1)

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        params = self.model.state_dict(keep_vars=True)
        for name, tensor in named_tensors:
            params[name].copy_(tensor.to(params[name].dtype))

    def _log(self, num_prompts: int, n: int, generations: list[Generation]) -> None:
        path = os.environ.get(LOG_ENV)
        if not path:
            return
        record = {
            "pid": os.getpid(),
            "prompts": num_prompts,
            "n": n,
            "samples": len(generations),
            "new_tokens": sum(int(g.response_ids.numel()) for g in generations),
            "weight_version": self.weight_version,
        }
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


def main() -> None:
    """Greedy decoding of the embedded tiny model: ``plain`` and ``hf`` agree token for token."""
    from transformers import AutoTokenizer

    from verl_lite.trainer.validation import EMBEDDED_MODEL
    from verl_lite.workers.rollout import HFRollout

    tokenizer = AutoTokenizer.from_pretrained(EMBEDDED_MODEL)
    prompts = [torch.tensor(tokenizer.encode(text)) for text in ("3 + 4 =", "Tom has 5 apples and eats 2.")]
    config = RolloutConfig(name="plain", micro_batch_size=8)
    greedy = SamplingConfig(n=1, temperature=0.0, do_sample=False)
    pad = tokenizer.pad_token_id or 0
    plain = PlainLoopRollout(EMBEDDED_MODEL, config, tokenizer.eos_token_id, pad).generate(
        prompts, greedy, 16
    )
    hf = HFRollout(EMBEDDED_MODEL, config, tokenizer.eos_token_id, pad).generate(prompts, greedy, 16)
    for p, h in zip(plain, hf):
        assert (p.prompt_index, p.sample_index, p.finish_reason) == (
            h.prompt_index,
            h.sample_index,
            h.finish_reason,
        )
        assert torch.equal(p.response_ids, h.response_ids)
        torch.testing.assert_close(p.log_probs, h.log_probs, atol=1e-4, rtol=0)
    print(f"plain == hf on {len(plain)} greedy samples:", repr(tokenizer.decode(plain[0].response_ids)))


if __name__ == "__main__":
    main()
