"""A custom rollout server: a plain token-by-token sampling loop, registered as ``plain``.

It shows the whole ``RolloutServer`` contract in one screen: ``generate`` turns one request's prompt
token ids into a ``TokenOutput`` (sampled ids, their log-probs, why sampling stopped, the weight
version), ``abort_all`` / ``resume`` cut running requests short and hold new ones, and
``load_weights`` takes the actor's weights after every step. Requests run one at a time here (a lock);
the built-in ``hf`` server batches the ones that arrive together. Select it by name (the file is
imported in every process, so the rollout workers find the registration)::

    python -m verl_lite.main_ppo trainer.extensions=[examples/custom_rollout.py] \\
        actor_rollout_ref.rollout.name=plain

Set ``PLAIN_ROLLOUT_LOG`` to a file path and every request appends one JSON line (pid, greedy, new
tokens, weight version) to it; on a cluster pass it to the workers with
``+ray_kwargs.ray_init.runtime_env.env_vars.PLAIN_ROLLOUT_LOG=/path/rollout.jsonl``.

Run this file to check it against the built-in ``hf`` server (same greedy tokens and log-probs).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Iterable

import torch

from verl_lite.workers.config import RolloutConfig, SamplingConfig
from verl_lite.workers.rollout import RolloutServer, TokenOutput, register_rollout

LOG_ENV = "PLAIN_ROLLOUT_LOG"


@register_rollout("plain")
class PlainLoopServer(RolloutServer):
    """Samples each request one token at a time with a KV cache, in a worker thread."""

    def __init__(self, model_path: str, config: RolloutConfig, eos_token_id, pad_token_id: int):
        from transformers import AutoModelForCausalLM

        super().__init__(model_path, config, eos_token_id, pad_token_id)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self._lock = asyncio.Lock()  # one request (or one weight load) on the model at a time
        self._abort = threading.Event()  # read by the sampling thread
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._in_flight = 0

    @property
    def load(self) -> int:
        return self._in_flight

    async def generate(
        self, request_id: str, prompt_ids: list[int], sampling: SamplingConfig, max_tokens: int
    ) -> TokenOutput:
        if sampling.do_sample and sampling.top_p < 1.0:
            raise ValueError(
                f"rollout.name=plain samples without nucleus cut; got top_p={sampling.top_p}, use 1.0."
            )
        self._in_flight += 1
        try:
            await self._resumed.wait()
            async with self._lock:
                version = self.weight_version
                tokens, log_probs, reason = await asyncio.to_thread(
                    self._sample, prompt_ids, sampling, max_tokens
                )
        finally:
            self._in_flight -= 1
        self._log(sampling, len(tokens), version)
        return TokenOutput(tokens, log_probs, reason, version)

    @torch.no_grad()
    def _sample(self, prompt_ids: list[int], sampling: SamplingConfig, max_tokens: int):
        """Sampled ids, their log-probs under softmax(logits / temperature), and the finish reason."""
        greedy = not sampling.do_sample or sampling.temperature <= 0
        temperature = 1.0 if greedy else sampling.temperature
        input_ids, past = torch.tensor([prompt_ids]), None
        tokens, log_probs = [], []
        for _ in range(max_tokens):
            if self._abort.is_set():
                return tokens, log_probs, "abort"
            result = self.model(input_ids=input_ids, past_key_values=past, use_cache=True)
            past = result.past_key_values
            logits = result.logits[0, -1].float() / temperature
            # the log-prob the actor recomputes: full softmax(logits / temperature), no top-k cut
            full = logits.log_softmax(dim=-1)
            if greedy:
                token = int(logits.argmax())
            else:
                if sampling.top_k and sampling.top_k > 0:
                    logits = logits.masked_fill(
                        logits < logits.topk(sampling.top_k).values[-1], float("-inf")
                    )
                token = int(torch.multinomial(logits.softmax(dim=-1), 1))
            tokens.append(token)
            log_probs.append(float(full[token]))
            if token in self.eos_token_ids:
                return tokens, log_probs, "stop"
            input_ids = torch.tensor([[token]])
        return tokens, log_probs, "length"

    async def abort_all(self) -> None:
        self._resumed.clear()
        self._abort.set()
        async with self._lock:  # the running request has returned with what it had
            pass

    async def resume(self) -> None:
        self._abort.clear()
        self._resumed.set()

    async def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        async with self._lock:
            with torch.no_grad():
                params = self.model.state_dict(keep_vars=True)
                for name, tensor in named_tensors:
                    params[name].copy_(tensor.to(params[name].dtype))
            self.weight_version = version

    def _log(self, sampling: SamplingConfig, new_tokens: int, version: int) -> None:
        path = os.environ.get(LOG_ENV)
        if not path:
            return
        greedy = not sampling.do_sample or sampling.temperature <= 0
        record = {"pid": os.getpid(), "greedy": greedy, "new_tokens": new_tokens, "weight_version": version}
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


async def _both(prompts: list[list[int]], greedy: SamplingConfig):
    from verl_lite.trainer.validation import EMBEDDED_MODEL
    from verl_lite.workers.rollout import get_rollout

    config = RolloutConfig(name="plain")
    servers = [cls(EMBEDDED_MODEL, config, 1, 0) for cls in (PlainLoopServer, get_rollout("hf"))]
    outputs = []
    for server in servers:
        outputs.append(
            await asyncio.gather(*(server.generate(f"r{i}", p, greedy, 16) for i, p in enumerate(prompts)))
        )
        server.shutdown()
    return outputs


def main() -> None:
    """Greedy decoding of the embedded tiny model: ``plain`` and ``hf`` agree token for token."""
    from transformers import AutoTokenizer

    from verl_lite.trainer.validation import EMBEDDED_MODEL

    tokenizer = AutoTokenizer.from_pretrained(EMBEDDED_MODEL)
    prompts = [tokenizer.encode(text) for text in ("3 + 4 =", "Tom has 5 apples and eats 2.")]
    greedy = SamplingConfig(n=1, temperature=0.0, do_sample=False)
    plain, hf = asyncio.run(_both(prompts, greedy))
    for p, h in zip(plain, hf):
        assert (p.token_ids, p.finish_reason) == (h.token_ids, h.finish_reason)
        torch.testing.assert_close(torch.tensor(p.log_probs), torch.tensor(h.log_probs), atol=1e-4, rtol=0)
    print(f"plain == hf on {len(plain)} greedy requests:", repr(tokenizer.decode(plain[0].token_ids)))


if __name__ == "__main__":
    main()
