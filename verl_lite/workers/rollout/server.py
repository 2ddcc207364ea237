"""The rollout-server contract: one request (prompt token ids) in, its sampled tokens and log-probs out.

A server is asynchronous: many ``generate`` calls run at once and the server decides how to batch them.
Sync code reaches it through :class:`verl_lite.workers.rollout.host.ServerHost`. Backends register here
(``@register_rollout("hf")``) and ``rollout.name`` selects one.
"""

from __future__ import annotations

import concurrent.futures
import zlib
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

import torch

from verl_lite.utils.registry import Registry
from verl_lite.workers.config import RolloutConfig, SamplingConfig

ROLLOUTS: Registry[type[RolloutServer]] = Registry("rollout backend")


def register_rollout(name: str):
    """Class decorator: make a rollout server selectable by ``rollout.name``."""
    return ROLLOUTS.register(name)


def get_rollout(name: str) -> type[RolloutServer]:
    """The rollout server class registered under ``name`` (the error lists the known backends)."""
    return ROLLOUTS.get(name)


@dataclass
class TokenOutput:
    """What one ``generate`` request returns."""

    token_ids: list[int]
    """Sampled ids, ending with EOS when ``finish_reason`` is "stop"."""
    log_probs: list[float]
    """Log-prob of each sampled id under log_softmax(logits / temperature) (temperature 1 when greedy)."""
    finish_reason: str
    """"stop" (EOS), "length" (hit ``max_tokens``) or "abort" (cut short by ``abort_all``)."""
    weight_version: int
    """Version of the weights that produced these tokens (-1 before any sync); the newest, when a request
    cut short by a weight sync was continued (see ``StickyClient``)."""
    min_weight_version: int | None = None
    """The oldest version that produced some of these tokens (None: ``weight_version``, one piece)."""

    def __post_init__(self) -> None:
        if self.min_weight_version is None:
            self.min_weight_version = self.weight_version


def request_seed(seed: int, request_id: str) -> int:
    """The sampling seed of one request: the same for the same id and seed on any server, in any batch.

    Seeding per request makes a trajectory's samples independent of which requests it was batched with
    and of the process that served it, so a resumed run (or a run on more servers) samples exactly what
    the original did.
    """
    return zlib.crc32(f"{seed}:{request_id}".encode()) & 0x7FFFFFFF


def is_greedy(sampling: SamplingConfig) -> bool:
    """Whether ``sampling`` means greedy decoding (``do_sample`` off or a non-positive temperature)."""
    return not sampling.do_sample or sampling.temperature <= 0


class RolloutServer(ABC):
    """Serves one sample per request from a copy of the policy, and accepts fresh weights in place.

    All coroutines run on one event loop (a :class:`ServerHost` thread, or the caller's own loop);
    ``generate`` is called concurrently, the other methods one at a time. ``weight_version`` is the
    version of the weights served now (-1 before any sync).

    With a LoRA actor (``model.lora_rank > 0``) ``load_weights`` receives adapters in the wire form of
    ``verl_lite.workers.lora`` (``lora_A`` / ``lora_B`` pairs): a server merges them into its base
    weights, or, with ``serves_lora_adapters``, is built with ``lora_rank=`` and serves them as adapters.
    """

    serves_lora_adapters: ClassVar[bool] = False
    # whether the process that served with it (the server shut down) may start another server later; an
    # engine with process-wide state of its own (vLLM's) leaves its process to end with the run
    leaves_process_reusable: ClassVar[bool] = True

    def __init__(
        self, model_path: str, config: RolloutConfig, eos_token_id: int | list[int], pad_token_id: int
    ):
        self.model_path = model_path
        self.config = config
        self.eos_token_ids = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
        self.pad_token_id = pad_token_id
        self.weight_version = -1
        # base of every request's sampling seed (see request_seed); the worker sets engine.seed
        self.seed = 0
        # where blocking model work (a batch, a weight copy) runs off the event loop: None is the loop's
        # default executor; ServerHost sets its WaitingThreadExecutor
        self.executor: concurrent.futures.Executor | None = None

    @abstractmethod
    async def generate(
        self, request_id: str, prompt_ids: list[int], sampling: SamplingConfig, max_tokens: int
    ) -> TokenOutput:
        """One sample of ``prompt_ids`` (``sampling.n`` is ignored); ``request_id`` must be unique in flight."""

    @abstractmethod
    async def abort_all(self) -> None:
        """End the running generations now (finish_reason "abort", tokens so far kept) and hold new ones.

        Requests that arrive after this call wait until :meth:`resume`.
        """

    @abstractmethod
    async def resume(self) -> None:
        """Let requests held since :meth:`abort_all` run."""

    @abstractmethod
    async def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Copy (name, tensor) pairs, in Hugging Face naming, into the served model; then serve ``version``.

        Never overlaps a generation step: a running batch finishes (or is aborted) first.
        """

    @property
    @abstractmethod
    def load(self) -> int:
        """Requests in flight: accepted by ``generate`` and not yet returned."""

    @property
    def supports_sleep(self) -> bool:
        """Whether :meth:`sleep` releases memory here (callers sleep the server only then)."""
        return False

    async def sleep(self) -> None:
        """Release generation memory while training runs in the same process (only if ``supports_sleep``).

        The served weights must survive (they may move off the device): :meth:`wake_up` comes before
        the next weight load or generation, whichever is first.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot sleep (supports_sleep is False).")

    async def wake_up(self) -> None:
        """Re-acquire what :meth:`sleep` released, before the weight load and the next generation."""
        raise NotImplementedError(f"{type(self).__name__} cannot sleep (supports_sleep is False).")

    def shutdown(self) -> None:
        """Stop serving and free the engine (processes, threads); in-flight requests are cancelled."""

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Full-sequence logits of the served model, for checks that weights arrived (optional)."""
        raise NotImplementedError(f"{type(self).__name__} does not expose logits.")
