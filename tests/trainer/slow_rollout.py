"""A slow hf rollout and a fully_async mode that checks what it trains (a ``trainer.extensions`` file).

``rollout.name=hf_slow`` serves like ``hf`` but sleeps ``SLOW_ROLLOUT_TOKEN_S`` (default 0.08) per
decoding step, so generations are still running when the trainer syncs weights. Trainer mode
``fully_async_checked`` is ``fully_async`` plus a look at the tensors of every trained trajectory whose
tokens came from more than one weight version: it logs how many there were (``check/spanning``) and how
many of those were contiguous with correct masks (``check/contiguous``).
"""

from __future__ import annotations

import math
import os
import time

from verl_lite.trainer.ppo.trainer_base import register_trainer
from verl_lite.trainer.ppo.trainer_fully_async import FullyAsyncTrainer
from verl_lite.workers.rollout import HFServer, register_rollout

TOKEN_S = float(os.environ.get("SLOW_ROLLOUT_TOKEN_S", "0.08"))


@register_rollout("hf_slow")
class SlowHFServer(HFServer):
    """The hf server, one forward pass (one decoded token) every ``TOKEN_S`` seconds at most."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        forward = self.model.forward

        def slow_forward(*a, **k):
            time.sleep(TOKEN_S)
            return forward(*a, **k)

        self.model.forward = slow_forward


@register_trainer("fully_async_checked")
class CheckedFullyAsync(FullyAsyncTrainer):
    def on_update_end(self, step, batch):
        metrics = super().on_update_end(step, batch)
        spanning = [i for i, t in enumerate(batch.tags) if t["min_weight_version"] < t["max_weight_version"]]
        ok = 0
        if spanning:
            keys = [batch.keys[i] for i in spanning]
            td = self.kv.kv_batch_get(
                keys, "train", select_fields=["responses", "response_mask", "rollout_log_probs"]
            )
            for row, i in enumerate(spanning):
                tag = batch.tags[i]
                responses = td.get("responses")[row].tolist()
                mask = td.get("response_mask")[row].tolist()
                log_probs = td.get("rollout_log_probs")[row].tolist()
                budget = self.config.data.max_response_length
                ok += (
                    len(responses) == len(mask) == len(log_probs) == tag["response_len"]
                    and 0 < len(responses) <= budget
                    and all(m == 1 for m in mask)
                    and all(math.isfinite(x) and x <= 1e-6 for x in log_probs)
                    and tag["finish_reason"] in ("stop", "length")
                    and (tag["finish_reason"] == "stop" or len(responses) == budget)
                )
        metrics["check/spanning"] = float(len(spanning))
        metrics["check/contiguous"] = float(ok)
        return metrics
