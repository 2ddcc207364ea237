"""FSDP engine offload (verl's fsdp_config keys): the same updates whichever state is parked on CPU."""

import ray
import torch

from verl_lite.workers.config import ActorFSDPConfig, EngineConfig, ModelConfig, OptimConfig


# max_calls=1: a fresh process, so its torch process group does not outlive the call
@ray.remote(num_cpus=0, max_calls=1)
def _three_steps_each(model_dir: str, configs: list[ActorFSDPConfig]) -> list[tuple[list[float], bool, set]]:
    """Per config: the losses of three AdamW steps, whether the engine moves the optimizer state, its devices."""
    from verl_lite.workers.engine.fsdp import FSDPEngine

    ids = torch.randint(0, 16, (2, 12), generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    def loss_fn(logits, mb):
        loss = logits.logsumexp(-1).mean()
        return loss, {"loss": float(loss)}

    results = []
    for fsdp_config in configs:
        engine = FSDPEngine(
            ModelConfig(path=model_dir), OptimConfig(lr=1e-2), EngineConfig(), fsdp_config=fsdp_config
        )
        losses = []
        for _ in range(3):
            losses.append(engine.forward_backward(batch, loss_fn)["loss"])
            engine.optimizer_step()
        state = engine.optimizer.state.values()
        devices = {v.device.type for s in state for v in s.values() if isinstance(v, torch.Tensor)}
        results.append((losses, engine.offload_optimizer, devices))
    return results


def test_offloading_params_or_optimizer_state_leaves_the_updates_unchanged(ray_local, tiny_model_dir):
    configs = [
        ActorFSDPConfig(),
        ActorFSDPConfig(param_offload=True),
        ActorFSDPConfig(optimizer_offload=True),
    ]
    plain, params, optim = ray.get(_three_steps_each.remote(tiny_model_dir, configs))
    assert plain[0][0] > plain[0][2]  # the updates did something
    # on CPU the same float ops run, only where the state lives differs
    assert params[0] == plain[0] and optim[0] == plain[0]
    # param_offload already keeps AdamW state with the CPU parameters; optimizer_offload alone moves it
    assert not params[1] and optim[1] and optim[2] == {"cpu"}
