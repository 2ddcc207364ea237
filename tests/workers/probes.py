"""Test-only worker subclasses that expose internal state (importable by Ray worker processes)."""

from __future__ import annotations

import torch

from verl_lite.single_controller import Dispatch, register
from verl_lite.workers.policy import PolicyWorker
from verl_lite.workers.rollout import HFServer, register_rollout
from verl_lite.workers.rollout.worker import RolloutWorker


@register_rollout("hf_sleep_probe")
class SleepProbeServer(HFServer):
    """HF server that can sleep the way vLLM's level 1 does, and records the order of calls.

    Sleeping moves the weights aside and zeroes the served ones (as if they had left the device);
    generating while asleep raises, and waking after a weight sync would restore stale weights.
    Consecutive requests of one generation are recorded as one ``generate`` event.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.events: list[str] = []
        self.stash: dict[str, torch.Tensor] | None = None

    @property
    def supports_sleep(self) -> bool:
        return True

    async def generate(self, request_id, prompt_ids, sampling, max_tokens):
        if self.stash is not None:
            raise RuntimeError("generate called on a sleeping rollout")
        if not self.events or self.events[-1] != "generate":
            self.events.append("generate")
        return await super().generate(request_id, prompt_ids, sampling, max_tokens)

    async def load_weights(self, named_tensors, version) -> None:
        if self.stash is not None:
            raise RuntimeError("load_weights called on a sleeping rollout")
        self.events.append("load_weights")
        await super().load_weights(named_tensors, version)

    async def sleep(self) -> None:
        self.events.append("sleep")
        with torch.no_grad():
            self.stash = {name: p.detach().clone() for name, p in self.model.named_parameters()}
            for p in self.model.parameters():
                p.zero_()

    async def wake_up(self) -> None:
        self.events.append("wake_up")
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                p.copy_(self.stash[name])
        self.stash = None


@register_rollout("hf_recording")
class RecordingServer(HFServer):
    """HF server that keeps every request it served: its id, the prompt ids it got and what it returned.

    Generation is the real one; the record is what a test compares the stored trajectories against.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.requests: list[dict] = []

    async def generate(self, request_id, prompt_ids, sampling, max_tokens):
        out = await super().generate(request_id, prompt_ids, sampling, max_tokens)
        self.requests.append(
            {
                "request_id": request_id,
                "prompt_ids": list(prompt_ids),
                "token_ids": list(out.token_ids),
                "log_probs": list(out.log_probs),
                "finish_reason": out.finish_reason,
            }
        )
        return out


class InspectableRollout(RolloutWorker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def rollout_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Logits of the served model (for checking that a weight sync arrived)."""
        return self.server.logits(input_ids, attention_mask)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def sleep_state(self) -> dict:
        """Whether the server sleeps here, is asleep now, and (probe backend) the calls it saw."""
        events = getattr(self.server, "events", None)
        return {"sleeps": self.sleeps_between_steps, "asleep": self.asleep, "events": events}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def recorded_requests(self) -> list[dict]:
        """Every request the (``hf_recording``) server served, in the order they finished."""
        return list(self.server.requests)


class InspectableActor(PolicyWorker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def set_actor_config(self, **keys) -> None:
        """Replace actor keys (loss mode, batching) between updates, so one group serves many settings."""
        import dataclasses

        self.config.actor = dataclasses.replace(self.config.actor, **keys)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def actor_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Logits of the actor model on full sequences."""
        with torch.no_grad():
            self.actor.model.eval()
            return self.actor.forward({"input_ids": input_ids, "attention_mask": attention_mask}).cpu()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def device_report(self) -> dict:
        """Where this rank trains: its visible devices, current device (and its UUID) and group backend."""
        import os

        import torch.distributed as dist

        on_gpu = self.actor.device.type == "cuda"
        return {
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "device": str(self.actor.device),
            "uuid": str(torch.cuda.get_device_properties(self.actor.device).uuid) if on_gpu else None,
            "backend": dist.get_backend(),
            "attention": self.actor.model.config._attn_implementation,
        }

    @register(dispatch_mode=Dispatch.RANK_ZERO)
    def full_weights(self) -> dict:
        return {name: t.detach().clone().cpu() for name, t in self.actor.named_full_parameters()}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def synced_names(self) -> list[str]:
        """The names a weight sync sends (a collective: every rank gathers)."""
        return [name for name, _ in self.actor.weights_to_sync()]

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def set_sync(self, name: str) -> None:
        """Send weights with checkpoint engine ``name`` from now on."""
        from verl_lite.checkpoint_engine import get_checkpoint_engine

        self.sync = get_checkpoint_engine(name)(
            self.config.rollout.update_weights_bucket_megabytes, rank=self.rank
        )

    @register(dispatch_mode=Dispatch.RANK_ZERO)
    def optimizer_state(self) -> dict:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_optimizer_state_dict(self.actor.model, self.actor.optimizer, options=options)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def keep_gradients(self) -> None:
        """From now on, each optimizer step first saves the full accumulated gradients (before clipping)."""
        from torch.distributed.tensor import DTensor

        step = self.actor.optimizer_step

        def saving_step():
            # full_tensor() is a collective: every rank gathers, each keeps the same full copy.
            self._saved_gradients = {
                name: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad).detach().clone().cpu()
                for name, p in self.actor.model.named_parameters()
            }
            return step()

        self.actor.optimizer_step = saving_step

    @register(dispatch_mode=Dispatch.RANK_ZERO)
    def saved_gradients(self) -> dict:
        """The gradients ``keep_gradients`` saved at the last optimizer step."""
        return self._saved_gradients
