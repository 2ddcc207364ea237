"""vLLM's real sleep mode (CUDA only): sleeping frees device memory, waking serves the same weights again."""

import pytest
import torch

from tests.workers.helpers import PROMPTS
from verl_lite.workers.config import RolloutConfig, SamplingConfig

pytestmark = [pytest.mark.gpu, pytest.mark.vllm]


def test_vllm_server_sleep_frees_device_memory_and_wake_up_restores_greedy_output(tiny_model_dir):
    import asyncio

    from verl_lite.workers.rollout import ServerHost, get_rollout

    config = RolloutConfig(
        name="vllm", prompt_length=16, response_length=6, free_cache_engine=True, gpu_memory_utilization=0.2
    )
    host = ServerHost(lambda: get_rollout("vllm")(tiny_model_dir, config, 1, 0))
    server = host.server
    greedy = SamplingConfig(n=1, temperature=0.0, do_sample=False)

    async def generate_all():
        outs = await asyncio.gather(*[server.generate(f"g{i}", p, greedy, 6) for i, p in enumerate(PROMPTS)])
        return [o.token_ids for o in outs]

    try:
        assert server.supports_sleep
        before = host.call(generate_all())
        free_awake = torch.cuda.mem_get_info()[0]
        host.call(server.sleep())
        # level 1 drops the KV cache (gpu_memory_utilization x device memory) and offloads the weights
        assert torch.cuda.mem_get_info()[0] - free_awake > 0.5 * 0.2 * torch.cuda.mem_get_info()[1]
        host.call(server.wake_up())
        assert host.call(generate_all()) == before
    finally:
        host.shutdown()
