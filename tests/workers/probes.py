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
