"""The rollout-backend contract (token ids in, sampled tokens and their log-probs out) and its registry."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

import torch

from verl_lite.utils.registry import Registry
from verl_lite.workers.config import RolloutConfig, SamplingConfig

ROLLOUTS: Registry[type[RolloutBackend]] = Registry("rollout backend")


def register_rollout(name: str):
    """Class decorator: make a backend selectable by ``rollout.name``."""
    return ROLLOUTS.register(name)


def get_rollout(name: str) -> type[RolloutBackend]:
    """The backend class registered under ``name`` (the error lists the known backends)."""
    return ROLLOUTS.get(name)


@dataclass
class Generation:
    """One sampled response of one prompt."""

    prompt_index: int
    """Index of the prompt in the batch handed to ``generate``."""
    sample_index: int
    """Which of the ``n`` samples of that prompt this is."""
    response_ids: torch.Tensor
    """(response_len,) generated token ids, ending with EOS when the sample stopped on it."""
    log_probs: torch.Tensor
    """(response_len,) log-probs of the sampled tokens under the sampling distribution's logits / temperature."""
    finish_reason: str
    """"stop" (EOS) or "length" (hit ``max_tokens``)."""


class RolloutBackend(ABC):
    """Generates responses for prompt token ids and accepts fresh weights in place.

    ``weight_version`` is the global step of the weights currently served (-1 before any sync).

    With a LoRA actor (``model.lora_rank > 0``) ``load_weights`` receives adapters in the wire form of
    ``verl_lite.workers.lora`` (``lora_A`` / ``lora_B`` pairs); a backend merges them into its base
    weights, or, with ``serves_lora_adapters``, is built with ``lora_rank=`` and serves them as adapters.
    """

    serves_lora_adapters: ClassVar[bool] = False

    def __init__(
        self, model_path: str, config: RolloutConfig, eos_token_id: int | list[int], pad_token_id: int
    ):
        self.model_path = model_path
        self.config = config
        self.eos_token_ids = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
        self.pad_token_id = pad_token_id
        self.weight_version = -1

    @abstractmethod
    def generate(
        self, prompts: list[torch.Tensor], sampling: SamplingConfig, max_tokens: int
    ) -> list[Generation]:
        """``sampling.n`` responses for every prompt (1-D token-id tensors), grouped by prompt."""

    @abstractmethod
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy (name, tensor) pairs, in Hugging Face naming, into the served model."""

    def cut_at_eos(self, tokens: torch.Tensor, max_tokens: int) -> tuple[int, str]:
        """Response length of sampled ``tokens`` (up to and including the first EOS) and its finish reason."""
        is_eos = torch.isin(tokens, torch.tensor(self.eos_token_ids))
        if is_eos.any():
            return int(is_eos.nonzero()[0, 0]) + 1, "stop"
        return min(int(tokens.numel()), max_tokens), "length"

    @property
    def supports_sleep(self) -> bool:
        """Whether :meth:`sleep` releases memory here (the worker calls it only then)."""
        return False

    def sleep(self) -> None:
        """Release generation memory while training runs in the same process (only if ``supports_sleep``).

        The served weights must survive (they may move off the device): the worker calls :meth:`wake_up`
        before the next weight sync or generation, whichever comes first.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot sleep (supports_sleep is False).")

    def wake_up(self) -> None:
        """Re-acquire what :meth:`sleep` released, before the weight sync and the next generation."""
        raise NotImplementedError(f"{type(self).__name__} cannot sleep (supports_sleep is False).")

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Full-sequence logits of the served model, for checks that weights arrived (optional)."""
        raise NotImplementedError(f"{type(self).__name__} does not expose logits.")
