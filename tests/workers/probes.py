"""Test-only worker subclasses that expose internal state (importable by Ray worker processes)."""

from __future__ import annotations

import torch

from verl_lite.single_controller import Dispatch, register
from verl_lite.workers.actor_rollout_ref import ActorRolloutRefWorker
from verl_lite.workers.rollout import HFRollout, register_rollout


@register_rollout("hf_sleep_probe")
class SleepProbeRollout(HFRollout):
    """HF rollout that can sleep the way vLLM's level 1 does, and records the order of calls.

    Sleeping moves the weights aside and zeroes the served ones (as if they had left the device);
    generating while asleep raises, and waking after a weight sync would restore stale weights.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.events: list[str] = []
        self.stash: dict[str, torch.Tensor] | None = None

    @property
    def supports_sleep(self) -> bool:
        return True

    def generate(self, prompts, sampling, max_tokens):
        if self.stash is not None:
            raise RuntimeError("generate called on a sleeping rollout")
        self.events.append("generate")
        return super().generate(prompts, sampling, max_tokens)

    def load_weights(self, named_tensors) -> None:
        if self.stash is not None:
            raise RuntimeError("load_weights called on a sleeping rollout")
        self.events.append("load_weights")
        super().load_weights(named_tensors)

    @torch.no_grad()
    def sleep(self) -> None:
        self.events.append("sleep")
        self.stash = {name: p.detach().clone() for name, p in self.model.named_parameters()}
        for p in self.model.parameters():
            p.zero_()

    @torch.no_grad()
    def wake_up(self) -> None:
        self.events.append("wake_up")
        for name, p in self.model.named_parameters():
            p.copy_(self.stash[name])
        self.stash = None


class InspectableActor(ActorRolloutRefWorker):
    @register(dispatch_mode=Dispatch.RANK_ZERO)
    def full_weights(self) -> dict:
        return {name: t.detach().clone().cpu() for name, t in self.actor.named_full_parameters()}

    def _set_sync(self, name: str) -> None:
        from verl_lite.checkpoint_engine import get_checkpoint_engine

        self.sync = get_checkpoint_engine(name)(
            self.config.rollout.update_weights_bucket_megabytes, rank=self.rank
        )

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def rollout_sleep_state(self) -> dict:
        """Whether the rollout sleeps here, is asleep now, and (probe backend) the calls it saw."""
        events = getattr(self.rollout, "events", None)
        return {"sleeps": self.rollout_sleeps, "asleep": self.rollout_asleep, "events": events}

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
