"""Rollout servers that SIGKILL their own process mid-step, once per run (a ``trainer.extensions`` file).

``rollout.name=hf_dying`` / ``vllm_dying`` serve like ``hf`` / ``vllm``. With ``DYING_ROLLOUT_DIR`` set,
the first server process to receive its ``DYING_ROLLOUT_NTH``-th request of training step
``DYING_ROLLOUT_STEP`` (request ids start with the prompt uid ``train<step>-``) writes ``killed.json``
there (the time and the ids of the requests in flight on it, the fatal one included) and kills itself
with SIGKILL. Creating that file is atomic, so only one process ever dies, and a replacement Ray starts
never does. Every server appends ``<time> <request id>`` to ``served.txt`` there for each request it
returns, which tells the test where the killed requests went and when.
"""

from __future__ import annotations

import json
import os
import signal
import time

from verl_lite.workers.rollout import HFServer, VLLMServer, register_rollout

DIR = os.environ.get("DYING_ROLLOUT_DIR")
STEP = int(os.environ.get("DYING_ROLLOUT_STEP", "1"))
NTH = int(os.environ.get("DYING_ROLLOUT_NTH", "3"))


class DyingServer:
    """Mixed in before a rollout server class: the kill, and the record of served requests."""

    async def generate(self, request_id, prompt_ids, sampling, max_tokens):
        if DIR and request_id.startswith(f"train{STEP}-"):
            self._step_requests = getattr(self, "_step_requests", 0) + 1
            self._in_flight_ids = getattr(self, "_in_flight_ids", set()) | {request_id}
            if self._step_requests == NTH:
                self._die()
        out = await super().generate(request_id, prompt_ids, sampling, max_tokens)
        if DIR:
            getattr(self, "_in_flight_ids", set()).discard(request_id)
            with open(os.path.join(DIR, "served.txt"), "a") as f:
                f.write(f"{time.time():.6f} {request_id}\n")
        return out

    def _die(self) -> None:
        try:
            fd = os.open(os.path.join(DIR, "killed.json"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return  # another process died already: the one kill of the run is done
        with os.fdopen(fd, "w") as f:
            json.dump({"time": time.time(), "in_flight": sorted(self._in_flight_ids)}, f)
        os.kill(os.getpid(), signal.SIGKILL)


@register_rollout("hf_dying")
class DyingHFServer(DyingServer, HFServer):
    """The hf server, dying as described above."""


@register_rollout("vllm_dying")
class DyingVLLMServer(DyingServer, VLLMServer):
    """The vllm server, dying as described above."""
