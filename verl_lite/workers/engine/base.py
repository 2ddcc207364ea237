"""The training-engine contract workers program against, and the engine registry."""

from __future__ import annotations

import os
import socket
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist

from verl_lite.utils.registry import Registry
from verl_lite.workers.engine.device import backend_uses_cuda, cuda_device_index, process_group_backend

ENGINES: Registry[type[TrainingEngine]] = Registry("training engine")
# Subfolder of an engine checkpoint with the Hugging Face config (architectures = the model class)
# and the tokenizer: what ``verl_lite.model_merger`` needs to rebuild a Hugging Face model.
HF_CONFIG_DIR = "huggingface"

# loss_fn(model_output, micro_batch) -> (loss to back-propagate, scalar metrics)
LossFn = Callable[[Any, dict[str, torch.Tensor]], tuple[torch.Tensor, dict[str, float]]]


def register_engine(name: str):
    """Class decorator: make an engine selectable by ``engine.name``."""
    return ENGINES.register(name)


def get_engine(name: str) -> type[TrainingEngine]:
    """The engine class registered under ``name`` (the error lists the known engines)."""
    return ENGINES.get(name)


class TrainingEngine(ABC):
    """Owns a model, its optimizer and scheduler; runs forward/backward and optimizer steps.

    Workers build micro-batches and losses; the engine hides how parameters are sharded and
    where they live. Every call that touches sharded state is collective: all ranks of the
    engine's process group must make it in the same order.

    Engines are built as ``cls(model_config, optim_config, engine_config, kind=..., fsdp_config=...,
    value_head=...)``; ``optim_config=None`` means a frozen model (the reference policy), ``fsdp_config``
    says where the model's state lives between uses (``param_offload``, and ``optimizer_offload`` for the
    actor), and ``value_head`` (a ``ValueHeadConfig``) adds a value head to the actor's body, whose values
    ``forward_with_values`` returns next to the logits and ``forward_backward`` hands the loss with them.
    """

    model: torch.nn.Module
    device: torch.device

    @abstractmethod
    def forward(self, micro_batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Model output (logits, or values for a value model) for one padded micro-batch.

        A causal LM given ``responses`` may return logits for the last ``response_width + 1``
        positions only: the ones ``sequences.response_logits`` slices.
        """

    @abstractmethod
    def forward_backward(self, micro_batch: dict[str, torch.Tensor], loss_fn: LossFn) -> dict[str, float]:
        """Run forward, ``loss_fn`` and backward, accumulating gradients; returns the loss metrics."""

    @abstractmethod
    def optimizer_step(self) -> dict[str, float]:
        """Clip gradients, step the optimizer, zero gradients; returns grad_norm and the lr it used."""

    @abstractmethod
    def lr_scheduler_step(self) -> None:
        """Advance the learning-rate schedule by one training step (PPO: after all of a step's updates)."""

    @abstractmethod
    def named_full_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield every (name, unsharded CPU-or-device tensor) of the model, in a fixed order."""

    def weights_to_sync(self) -> Iterator[tuple[str, torch.Tensor]]:
        """What a weight sync sends the rollout: by default every parameter (``named_full_parameters``).

        An engine that trains LoRA adapters sends only those (``verl_lite.workers.lora``'s wire form).
        """
        return self.named_full_parameters()

    @abstractmethod
    def save_checkpoint(self, path: str) -> None:
        """Save model, optimizer, scheduler and RNG state (sharded) under ``path``, config in ``HF_CONFIG_DIR``."""

    @abstractmethod
    def load_checkpoint(self, path: str) -> None:
        """Restore what ``save_checkpoint`` wrote."""

    @abstractmethod
    def export_hf(self, path: str, tokenizer: Any = None) -> None:
        """Write a Hugging Face folder (``save_pretrained``, plus tokenizer) that transformers and vLLM load."""


def init_distributed(backend: str = "auto") -> None:
    """Join the worker group's process group (env:// rendezvous set by the worker group), once per process."""
    if dist.is_initialized():
        return
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if not os.environ.get("MASTER_PORT") or os.environ["MASTER_PORT"] == "0":
        with socket.socket() as sock:
            sock.bind(("", 0))
            os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
    backend = process_group_backend(backend, torch.cuda.is_available())
    if backend_uses_cuda(backend):
        torch.cuda.set_device(
            cuda_device_index(
                _ray_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES"), int(os.environ.get("LOCAL_RANK", 0))
            )
        )
    if os.environ["WORLD_SIZE"] == "1":
        # one process needs no rendezvous: an in-process store, no port that another process could take
        # between the worker group's probe and this bind
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
        return
    dist.init_process_group(backend=backend, init_method="env://")


def _ray_gpu_ids() -> list[str]:
    """The GPUs Ray assigned to this process (empty outside a Ray worker)."""
    import ray

    return [str(i) for i in ray.get_gpu_ids()] if ray.is_initialized() else []
