"""Test-only worker subclasses that expose internal state (importable by Ray worker processes)."""

from __future__ import annotations

from verl_lite.single_controller import Dispatch, register
from verl_lite.workers.actor_rollout_ref import ActorRolloutRefWorker


class InspectableActor(ActorRolloutRefWorker):
    @register(dispatch_mode=Dispatch.RANK_ZERO)
    def full_weights(self) -> dict:
        return {name: t.detach().clone().cpu() for name, t in self.actor.named_full_parameters()}

    def _set_sync(self, name: str) -> None:
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
