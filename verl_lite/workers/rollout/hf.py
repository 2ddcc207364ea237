"""Rollout server on Hugging Face ``generate``: queued requests run as one left-padded batched generate.

Requests that share sampling parameters are gathered for a few milliseconds (up to
``rollout.max_num_seqs``) and decoded together (each row stops at its own ``max_tokens``, so the later
turns of multi-turn trajectories, whose budgets differ, still share one) off the event loop, on the
server's ``executor``, so the loop keeps accepting requests while the model runs. In a ``ServerHost``
that is the thread waiting in ``host.call``, the one that trains in the hybrid placement (see
:class:`~verl_lite.workers.rollout.host.WaitingThreadExecutor`). Log-probs are those of the raw
logits / temperature (temperature 1 when greedy), the convention the actor's old log-probs use.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from verl_lite.workers.config import RolloutConfig, SamplingConfig
from verl_lite.workers.lora import merge_adapters
from verl_lite.workers.rollout.server import (
    RolloutServer,
    TokenOutput,
    is_greedy,
    register_rollout,
    request_seed,
)
from verl_lite.workers.sequences import log_probs_of


def load_hf_model(model_path: str):
    """The model at ``model_path`` in eval mode: bf16 on CUDA, fp32 on CPU."""
    from transformers import AutoModelForCausalLM

    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    return AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(device).eval()


def left_pad(prompts: list[list[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), both (batch, longest prompt), prompts right-aligned."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for i, prompt in enumerate(prompts):
        input_ids[i, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        attention_mask[i, width - len(prompt) :] = 1
    return input_ids, attention_mask


# Uniform draws a seeded sampler takes from each row's generator at once (a few steps' worth).
UNIFORMS_PER_CHUNK = 1 << 14


def seeded_sampler(sampling: SamplingConfig, seeds: list[int], max_steps: int = 1):
    """A logits processor that samples each row from its own generator, for greedy ``generate`` to pick.

    It applies temperature, top-k and top-p to the raw logits and adds Gumbel noise drawn from row
    ``i``'s generator (seeded with ``seeds[i]``): the argmax of logits + Gumbel noise is an exact sample of
    softmax(logits). Each row's draws depend on its seed and position only, not on the rest of the batch.
    ``max_steps`` (the longest budget) bounds how many steps' uniforms are drawn ahead.
    """
    from transformers import LogitsProcessor, LogitsProcessorList

    generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
    top_k = sampling.top_k if sampling.top_k and sampling.top_k > 0 else None

    class SeededSampler(LogitsProcessor):
        # Gumbel noise for the next steps, (rows, steps, vocab): one rand call per row per chunk of
        # steps instead of per step. torch.rand(k * V) is the same stream as k calls of torch.rand(V),
        # so the samples do not change.
        noise: torch.Tensor | None = None
        next_step = 0

        def gumbel(self, vocab: int) -> torch.Tensor:
            if self.noise is None or self.next_step == self.noise.shape[1]:
                steps = max(1, min(UNIFORMS_PER_CHUNK // vocab, max_steps))
                rows = [torch.rand(steps * vocab, generator=g).view(steps, vocab) for g in generators]
                uniform = torch.stack(rows).clamp_(1e-20, 1.0 - 1e-7)
                self.noise, self.next_step = -torch.log(-torch.log(uniform)), 0
            self.next_step += 1
            return self.noise[:, self.next_step - 1]

        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            scores = scores.float() / sampling.temperature
            if top_k is not None and top_k < scores.shape[-1]:
                kth = scores.topk(top_k, dim=-1).values[:, -1:]
                scores = scores.masked_fill(scores < kth, float("-inf"))
            if sampling.top_p < 1.0:
                # drop a token when the tokens more likely than it already hold top_p of the mass
                ordered, order = scores.sort(dim=-1, descending=True)
                probs = ordered.softmax(dim=-1)
                drop_sorted = probs.cumsum(dim=-1) - probs > sampling.top_p
                drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
                scores = scores.masked_fill(drop, float("-inf"))
            return scores + self.gumbel(scores.shape[-1]).to(scores.device)

    return LogitsProcessorList([SeededSampler()])


@torch.no_grad()
def generate_batch(
    model,
    prompts: list[list[int]],
    sampling: SamplingConfig,
    max_tokens: int | list[int],
    eos_token_ids: list[int],
    pad_token_id: int,
    abort: threading.Event | None = None,
    seeds: list[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One batched ``model.generate``: (tokens, log_probs), both (batch, new_tokens), rows padded after EOS.

    ``max_tokens`` is one budget for every row or one per row (a row that reaches its own stops there,
    padded like a finished one). Setting ``abort`` ends every row at the next token. With ``seeds`` (one
    per row) a sampled row depends on its seed alone (see :func:`seeded_sampler`); without, rows draw
    from torch's global generator.
    """
    input_ids, attention_mask = left_pad(prompts, pad_token_id)
    budgets = [max_tokens] * len(prompts) if isinstance(max_tokens, int) else list(max_tokens)
    if is_greedy(sampling):
        kwargs = {"do_sample": False}
    elif seeds is not None:
        kwargs = {"do_sample": False, "logits_processor": seeded_sampler(sampling, seeds, max(budgets))}
    else:
        top_k = sampling.top_k if sampling.top_k and sampling.top_k > 0 else None
        kwargs = {
            "do_sample": True,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": top_k,
        }
    out = model.generate(
        input_ids=input_ids.to(model.device),
        attention_mask=attention_mask.to(model.device),
        max_new_tokens=max(budgets),
        eos_token_id=eos_token_ids,
        pad_token_id=pad_token_id,
        return_dict_in_generate=True,
        output_logits=True,
        stopping_criteria=stop_rows(input_ids.shape[1], budgets, abort),
        **kwargs,
    )
    tokens = out.sequences[:, input_ids.shape[1] :].cpu()
    logits = torch.stack(out.logits, dim=1).float().cpu()  # (batch, new_tokens, vocab), raw logits
    temperature = 1.0 if is_greedy(sampling) else sampling.temperature
    return tokens, log_probs_of(logits, tokens, temperature)


def response_length(tokens: torch.Tensor, eos_token_ids: list[int]) -> int | None:
    """Length of sampled ``tokens`` up to and including the first EOS (None without an EOS)."""
    is_eos = torch.isin(tokens, torch.tensor(eos_token_ids))
    return int(is_eos.nonzero()[0, 0]) + 1 if is_eos.any() else None


def stop_rows(prompt_width: int, budgets: list[int], abort: threading.Event | None = None):
    """A ``StoppingCriteriaList`` that ends row ``i`` after ``budgets[i]`` new tokens, and every row once
    ``abort`` is set."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    limits = torch.tensor(budgets)

    class StopRows(StoppingCriteria):
        def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
            done = limits <= input_ids.shape[1] - prompt_width
            if abort is not None and abort.is_set():
                done[:] = True
            return done.to(input_ids.device)

    return StoppingCriteriaList([StopRows()])


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: SamplingConfig
    max_tokens: int
    future: asyncio.Future
    seed: int = 0


def _batch_key(sampling: SamplingConfig) -> tuple:
    # Requests with equal keys decode identically and can share one generate (n does not matter here).
    if is_greedy(sampling):
        return ("greedy",)
    return (sampling.temperature, sampling.top_p, sampling.top_k)


@register_rollout("hf")
class HFServer(RolloutServer):
    """A full copy of the policy in this process, serving requests by dynamic batching.

    ``num_batches`` / ``num_batched_requests`` count the batched generates run and the requests they
    served. It does not sleep (``supports_sleep`` is False): its KV cache lives only inside each batch.
    """

    # Seconds without a new request the gatherer waits for before it runs a batch. The requests of one
    # agent-loop worker's turn arrive together (``RolloutClient``); the window only has to catch the
    # other workers' calls, which come within a millisecond or two of each other.
    gather_window_s = 0.002

    def __init__(
        self, model_path: str, config: RolloutConfig, eos_token_id: int | list[int], pad_token_id: int
    ):
        super().__init__(model_path, config, eos_token_id, pad_token_id)
        self.model = load_hf_model(model_path)
        # Unmerged copies of the weights LoRA adapters add to, taken when the first adapter arrives.
        self._lora_base: dict[str, torch.Tensor] = {}
        self.num_batches = self.num_batched_requests = 0
        self._queue: list[_Request] = []
        self._in_flight = self._decoding = 0
        self._abort = threading.Event()  # read by the generate thread's stopping criterion
        # asyncio primitives bind to the loop of their first use: the loop this server is served on.
        self._arrived = asyncio.Event()
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._model_lock = asyncio.Lock()  # one batch or one weight load at a time
        self._dispatcher: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last_arrival = 0.0  # loop time of the newest queued request

    @property
    def load(self) -> int:
        return self._in_flight

    @property
    def num_decoding(self) -> int:
        """Requests of the batch being decoded now (the rest of ``load`` is queued)."""
        return self._decoding

    async def generate(
        self, request_id: str, prompt_ids: list[int], sampling: SamplingConfig, max_tokens: int
    ) -> TokenOutput:
        if self._dispatcher is None:
            self._loop = asyncio.get_running_loop()
            self._dispatcher = asyncio.create_task(self._dispatch(), name="hf-rollout-dispatcher")
        elif self._dispatcher.done():
            self._dispatcher.result()  # it died: every later request raises its error instead of hanging
        request = _Request(
            list(prompt_ids),
            sampling,
            max_tokens,
            self._loop.create_future(),
            request_seed(self.seed, request_id),
        )
        self._in_flight += 1
        try:
            self._queue.append(request)
            self._last_arrival = self._loop.time()
            self._arrived.set()
            return await request.future
        finally:
            self._in_flight -= 1

    async def _dispatch(self) -> None:
        while True:
            await self._arrived.wait()
            await self._resumed.wait()
            await self._gather()
            async with self._model_lock:
                if not self._resumed.is_set():
                    continue  # abort_all came during the gather window: hold the queue
                batch = self._take_batch()
                if batch:
                    await self._run(batch)

    async def _gather(self) -> None:
        # until no request has arrived for a whole window (the burst of one call ends it in one window)
        while len(self._queue) < self.config.max_num_seqs:
            quiet = self._loop.time() - self._last_arrival
            if quiet >= self.gather_window_s:
                return
            await asyncio.sleep(self.gather_window_s - quiet)

    def _take_batch(self) -> list[_Request]:
        """The oldest request and the next queued ones with its key, up to ``max_num_seqs``."""
        self._queue = [r for r in self._queue if not r.future.done()]  # cancelled callers
        if not self._queue:
            self._arrived.clear()
            return []
        key = _batch_key(self._queue[0].sampling)
        batch, rest = [], []
        for request in self._queue:
            same = len(batch) < self.config.max_num_seqs and _batch_key(request.sampling) == key
            (batch if same else rest).append(request)
        self._queue = rest
        if not rest:
            self._arrived.clear()
        return batch

    async def _run(self, batch: list[_Request]) -> None:
        first = batch[0]
        version = self.weight_version
        self._decoding = len(batch)
        try:
            tokens, log_probs = await self._loop.run_in_executor(
                self.executor,
                functools.partial(
                    generate_batch,
                    self.model,
                    [r.prompt_ids for r in batch],
                    first.sampling,
                    [r.max_tokens for r in batch],
                    self.eos_token_ids,
                    self.pad_token_id,
                    self._abort,
                    [r.seed for r in batch],
                ),
            )
        except Exception as error:  # noqa: BLE001 - handed to every caller of the batch
            for request in batch:
                if not request.future.done():
                    request.future.set_exception(error)
            return
        finally:
            self._decoding = 0
        self.num_batches += 1
        self.num_batched_requests += len(batch)
        for row, request in enumerate(batch):
            # past its own budget a row holds padding (it stopped there, or ran on for longer rows)
            budget = min(request.max_tokens, tokens.shape[1])
            length = response_length(tokens[row, :budget], self.eos_token_ids)
            if length is not None:
                reason = "stop"
            else:  # no EOS: it used its budget, or abort_all cut the batch short of it
                length, reason = budget, ("length" if budget == request.max_tokens else "abort")
            if not request.future.done():
                request.future.set_result(
                    TokenOutput(
                        tokens[row, :length].tolist(), log_probs[row, :length].tolist(), reason, version
                    )
                )

    async def abort_all(self) -> None:
        self._resumed.clear()
        self._abort.set()
        async with self._model_lock:  # the running batch has returned, its callers have their outputs
            pass

    async def resume(self) -> None:
        self._abort.clear()
        self._resumed.set()

    async def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        async with self._model_lock:
            # LoRA adapters (lora_A / lora_B pairs) are merged into the kept base weights first
            await asyncio.get_running_loop().run_in_executor(
                self.executor,
                copy_weights_in_place,
                self.model,
                merge_adapters(named_tensors, self._base_weight),
            )
            self.weight_version = version

    def _base_weight(self, name: str) -> torch.Tensor:
        if name not in self._lora_base:
            self._lora_base[name] = self.model.state_dict()[name].detach().clone()
        return self._lora_base[name]

    def shutdown(self) -> None:
        self._abort.set()
        if self._dispatcher is not None and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._dispatcher.cancel)
            for request in self._queue:
                self._loop.call_soon_threadsafe(request.future.cancel)
        self._dispatcher, self._queue = None, []

    @torch.no_grad()
    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        device = self.model.device
        return (
            self.model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device))
            .logits.float()
            .cpu()
        )


@torch.no_grad()
def copy_weights_in_place(model, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Copy (name, tensor) pairs into ``model``'s parameters and buffers, keeping their device and dtype."""
    params = model.state_dict(keep_vars=True)  # includes tied names such as lm_head.weight
    for name, tensor in named_tensors:
        target = params.get(name)
        if target is None:
            raise KeyError(f"rollout model has no parameter {name!r} (weights come from a different model?).")
        target.copy_(tensor.to(device=target.device, dtype=target.dtype))
