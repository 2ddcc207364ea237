"""A scripted policy for tool runs through main_ppo: it calls the calculator once, then answers with its result.

Loaded with ``trainer.extensions`` and selected as ``rollout.name=scripted_calculator``. It scripts the
*policy* (which tokens come back), not any infrastructure: the agent loop, the tool, the parser, the
masks, the KV store and the training step all run for real. Its turns:

* a context without a tool result: ``<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>``
  (and, to exercise the error path, a call of an unknown tool in sample 0 of every prompt);
* a context with a tool result ``R``: ``#### R``.

Each turn ends with EOS; log-probs are those of the served tiny model for the scripted tokens, so the
actor's recomputed ones agree with them.
"""

from __future__ import annotations

import asyncio
import json
import re

import torch

from verl_lite.workers.rollout import TokenOutput, register_rollout
from verl_lite.workers.rollout.hf import HFServer

CALL = {"name": "calculator", "arguments": {"expression": "6*7"}}
BAD_CALL = {"name": "abacus", "arguments": {"expression": "1+1"}}


@register_rollout("scripted_calculator")
class ScriptedCalculatorPolicy(HFServer):
    """The hf server's model scores the scripted turns; the turns themselves are fixed."""

    def __init__(self, *args, **kwargs):
        from transformers import AutoTokenizer

        super().__init__(*args, **kwargs)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)

    async def generate(self, request_id, prompt_ids, sampling, max_tokens):
        context = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        results = re.findall(r"<tool_response>(.*?)</tool_response>", context, flags=re.S)
        if results:
            text = f"#### {results[-1].strip()}"
        else:
            # request ids are {prompt uid}-{sample}-{turn}: sample 0's first turn calls a tool that is not there
            call = BAD_CALL if request_id.endswith("-0-0") else CALL
            text = f"<tool_call>{json.dumps(call)}</tool_call>"
        ids = self.tokenizer.encode(text, add_special_tokens=False)[: max_tokens - 1] + [
            self.eos_token_ids[0]
        ]
        log_probs = await asyncio.to_thread(self._log_probs, list(prompt_ids), ids)
        return TokenOutput(ids, log_probs, "stop", self.weight_version)

    @torch.no_grad()
    def _log_probs(self, prompt: list[int], response: list[int]) -> list[float]:
        logits = self.model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1].float()
        return logits.log_softmax(-1).gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1).tolist()
