"""FSDP2 training engine: ``fully_shard`` per decoder layer, AdamW, on CPU (gloo) and GPU (nccl)."""

from __future__ import annotations

import copy
import dataclasses
import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard
from torch.distributed.tensor import DTensor

from verl_lite.workers.config import (
    ActorFSDPConfig,
    EngineConfig,
    FSDPConfig,
    ModelConfig,
    OptimConfig,
    RLModelConfig,
    ValueHeadConfig,
)
from verl_lite.workers.engine.base import (
    HF_CONFIG_DIR,
    LossFn,
    TrainingEngine,
    init_distributed,
    register_engine,
)
from verl_lite.workers.engine.device import backend_uses_cuda
from verl_lite.workers.engine.packing import pack_rows, packed_indices, unpack_to_grid
from verl_lite.workers.engine.schedule import build_scheduler
from verl_lite.workers.engine.value_head import (
    VALUE_HEAD_FILE,
    attach_value_head,
    is_value_head,
    split_value_head,
)
from verl_lite.workers.engine.varlen_attention import packed_attention_implementation
from verl_lite.workers.lora import adapter_tensors, hf_name, lora_scaling, merged_state_dict, wrap_with_lora

MODEL_KINDS = ("causal_lm", "value")


def load_hf_model(config: ModelConfig, kind: str, attn_implementation: str | None = None) -> torch.nn.Module:
    """Load a causal LM, or the same body with a scalar head per token for ``kind="value"``, in fp32."""
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    if kind not in MODEL_KINDS:
        raise ValueError(f"model kind {kind!r} is not one of {MODEL_KINDS}.")
    common = {"dtype": torch.float32, "trust_remote_code": config.trust_remote_code}
    if attn_implementation:
        common["attn_implementation"] = attn_implementation
    if kind == "causal_lm":
        return AutoModelForCausalLM.from_pretrained(config.path, **common)
    return AutoModelForTokenClassification.from_pretrained(config.path, num_labels=1, **common)


@register_engine("fsdp")
class FSDPEngine(TrainingEngine):
    """Shards a Hugging Face model with FSDP2 over the worker group's process group.

    Parameters stay fp32; on GPU the forward/backward run in ``engine.param_dtype`` (bf16 by
    default) with fp32 gradient reduction. Gradients are averaged over data-parallel ranks by
    the reduce-scatter, which is what ``agg_loss``'s ``dp_size`` convention expects.

    Where the state lives between uses follows ``fsdp_config`` (see ``ActorFSDPConfig``).

    ``model_config.lora_rank > 0`` wraps a trained model (one with an optimizer) in PEFT LoRA
    adapters before sharding: the base stays frozen, and only the adapters (plus a value model's
    head) reach the optimizer, the weight sync (:meth:`weights_to_sync`) and the checkpoint. A
    frozen engine (``optim_config=None``) is never wrapped: it is the base model.
    ``model_config.use_remove_padding`` packs each micro-batch's rows into one sequence for the
    forward (``engine/packing.py``, attention from ``engine/varlen_attention.py``).
    ``value_head`` puts a scalar head on a causal LM's body (``engine/value_head.py``): the critic that
    shares the actor's weights, trained with them and read by :meth:`forward_with_values`.
    """

    def __init__(
        self,
        model_config: ModelConfig,
        optim_config: OptimConfig | None = None,
        engine_config: EngineConfig | None = None,
        kind: str = "causal_lm",
        fsdp_config: FSDPConfig | None = None,
        value_head: ValueHeadConfig | None = None,
    ):
        # A plain ModelConfig (SFT, reward model) trains every weight on padded micro-batches.
        if not isinstance(model_config, RLModelConfig):
            model_config = RLModelConfig(**dataclasses.asdict(model_config))
        self.model_config = model_config
        self.optim_config = optim_config
        self.engine_config = engine_config or EngineConfig()
        self.fsdp_config = fsdp_config or FSDPConfig()
        init_distributed(self.engine_config.backend)
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        on_gpu = torch.cuda.is_available() and backend_uses_cuda(dist.get_backend())
        self.device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
        torch.manual_seed(self.engine_config.seed)
        compute_dtype = getattr(torch, self.engine_config.param_dtype) if on_gpu else torch.float32
        attention = (
            packed_attention_implementation(self.device, compute_dtype)
            if model_config.use_remove_padding
            else None
        )
        model = load_hf_model(model_config, kind, attention)
        if model_config.enable_gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self._hf_class = type(model)
        self.lora_scaling = None
        if model_config.lora_rank > 0 and optim_config is not None:
            model = wrap_with_lora(model, model_config, kind)
            self.lora_scaling = lora_scaling(model_config.lora_alpha, model_config.lora_rank)
        self.value_head = None
        if value_head is not None:
            if kind != "causal_lm":
                raise ValueError(f"a value head goes on a causal LM, not on a {kind!r} model.")
            # after the LoRA wrap: the new head trains in full next to the adapters
            body = model.get_base_model() if self.lora_scaling is not None else model
            self.value_head = attach_value_head(body, value_head.hidden_dim)
        self.mesh = init_device_mesh(self.device.type, (self.world_size,))
        mp_policy = (
            MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
            if on_gpu
            else MixedPrecisionPolicy()
        )
        offload = self.fsdp_config.param_offload
        # pinned host memory makes the per-layer copies asynchronous; it needs a GPU
        policy = CPUOffloadPolicy(pin_memory=on_gpu) if offload else OffloadPolicy()
        # the head is a unit of its own: it runs on the body's output, after the root's forward
        for layer in [*_decoder_layers(model), *([self.value_head] if self.value_head is not None else [])]:
            fully_shard(layer, mesh=self.mesh, mp_policy=mp_policy, offload_policy=policy)
        fully_shard(
            model if offload else model.to(self.device),
            mesh=self.mesh,
            mp_policy=mp_policy,
            offload_policy=policy,
        )
        # With param_offload the optimizer state already lives with the (CPU) parameters.
        self.offload_optimizer = (
            isinstance(self.fsdp_config, ActorFSDPConfig)
            and self.fsdp_config.optimizer_offload
            and not offload
        )
        self.model = model
        self.hf_config = model.config
        self.optimizer = self.scheduler = None
        if optim_config is not None:
            # fused: one kernel pass over every parameter instead of a Python loop (docs/benchmarks.md)
            self.optimizer = torch.optim.AdamW(
                [p for p in model.parameters() if p.requires_grad],
                lr=optim_config.lr,
                betas=tuple(optim_config.betas),
                weight_decay=optim_config.weight_decay,
                fused=True,
            )
            self.scheduler = build_scheduler(self.optimizer, optim_config)

    # ---- compute --------------------------------------------------------------------------------
    def _model_inputs(self, micro_batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        keys = ("input_ids", "attention_mask", "position_ids")
        return {k: micro_batch[k].to(self.device) for k in keys if k in micro_batch}

    def forward(self, micro_batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._forward(micro_batch, with_values=False)

    def forward_with_values(self, micro_batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (as :meth:`forward`) and the value head's values, (batch, columns, 1), of one micro-batch."""
        if self.value_head is None:
            raise RuntimeError("this engine was built without a value head (actor.value_head.enable).")
        return self._forward(micro_batch, with_values=True)

    def _forward(
        self, micro_batch: dict[str, torch.Tensor], with_values: bool
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        if self.model_config.use_remove_padding:
            return self._forward_packed(micro_batch, with_values)
        kwargs = {}
        if "responses" in micro_batch and self._is_causal_lm:
            # Only the last response_width + 1 positions predict response tokens (prompts are
            # left-padded, responses right-padded): skip the vocabulary projection for the rest.
            kwargs["logits_to_keep"] = micro_batch["responses"].shape[1] + 1
        output = self.model(
            **self._model_inputs(micro_batch), use_cache=False, output_hidden_states=with_values, **kwargs
        )
        if not with_values:
            return output.logits.float()
        return output.logits.float(), self.value_head(output.hidden_states[-1]).float()

    def _forward_packed(
        self, micro_batch: dict[str, torch.Tensor], with_values: bool
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The padded forward's output, (batch, columns, ...), computed on the rows packed end to end
        (with ``with_values``, also the value head's values on the same grid)."""
        packed = pack_rows(micro_batch["input_ids"], micro_batch["attention_mask"])
        width = packed.valid.shape[1]
        columns = slice(0, width)
        if "responses" in micro_batch and self._is_causal_lm:
            columns = slice(width - micro_batch["responses"].shape[1] - 1, width)
        index, keep = packed_indices(packed.valid, columns)
        index, keep = index.to(self.device), keep.to(self.device)
        kwargs = {
            k: v.to(self.device) if isinstance(v, torch.Tensor) else v
            for k, v in packed.attention_kwargs().items()
        }
        if self._is_causal_lm:
            kwargs["logits_to_keep"] = index  # the vocabulary projection only where the caller reads
        result = self.model(
            input_ids=packed.input_ids.to(self.device),
            position_ids=packed.position_ids.to(self.device),
            use_cache=False,
            output_hidden_states=with_values,
            **kwargs,
        )
        output = result.logits.float()
        if not self._is_causal_lm:
            output = output[:, index]
        if with_values:
            values = self.value_head(result.hidden_states[-1]).float()[:, index]
            return unpack_to_grid(output, keep), unpack_to_grid(values, keep)
        return unpack_to_grid(output, keep)

    @property
    def _is_causal_lm(self) -> bool:
        return self._hf_class.__name__.endswith("ForCausalLM")

    def forward_backward(self, micro_batch: dict[str, torch.Tensor], loss_fn: LossFn) -> dict[str, float]:
        self.model.train()
        output = (
            self.forward(micro_batch) if self.value_head is None else self.forward_with_values(micro_batch)
        )
        loss, metrics = loss_fn(output, micro_batch)
        loss.backward()
        return metrics

    def optimizer_step(self) -> dict[str, float]:
        if self.optimizer is None:
            raise RuntimeError("this engine was built without an optimizer (optim_config=None).")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.optim_config.grad_clip)
        if isinstance(grad_norm, DTensor):
            grad_norm = grad_norm.full_tensor()
        lr = self.scheduler.get_last_lr()[0]
        if torch.isfinite(grad_norm):
            if self.offload_optimizer:
                _move_optimizer_state(self.optimizer, self.device)
            self.optimizer.step()
            if self.offload_optimizer:
                _move_optimizer_state(self.optimizer, torch.device("cpu"))
        self.optimizer.zero_grad(set_to_none=True)
        return {"grad_norm": float(grad_norm), "lr": float(lr)}

    def lr_scheduler_step(self) -> None:
        self.scheduler.step()

    @contextmanager
    def adapters_disabled(self) -> Iterator[None]:
        """Inside the block the model is its base (LoRA adapters off): the reference policy of a LoRA actor."""
        if self.lora_scaling is None:
            raise RuntimeError(
                "adapters_disabled needs a LoRA engine (model.lora_rank > 0 and an optimizer)."
            )
        with self.model.disable_adapter():
            yield

    # ---- weights out ----------------------------------------------------------------------------
    def named_full_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in self.model.state_dict().items():
            yield name, tensor.full_tensor() if isinstance(tensor, DTensor) else tensor

    def weights_to_sync(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Every parameter in Hugging Face naming (not a value head's), or with LoRA only the adapters
        (``lora.py``'s wire form)."""
        if self.lora_scaling is None:
            yield from ((name, t) for name, t in self.named_full_parameters() if not is_value_head(name))
            return
        for name, param in self.model.named_parameters():
            if param.requires_grad and not is_value_head(hf_name(name)):
                full = param.full_tensor() if isinstance(param, DTensor) else param
                yield from adapter_tensors([(name, full.detach())], self.lora_scaling)

    def export_hf(self, path: str, tokenizer: Any = None) -> None:
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_model_state_dict(self.model, options=options)
        if self.rank == 0 and self.lora_scaling is not None:
            state = merged_state_dict(state, self.lora_scaling)
        if self.rank == 0:
            os.makedirs(path, exist_ok=True)
            state, head = split_value_head(state)
            if head:
                torch.save(head, os.path.join(path, VALUE_HEAD_FILE))
            with torch.device("meta"):
                export_model = self._hf_class(self.hf_config)
            export_model.load_state_dict(state, assign=True)
            export_model.save_pretrained(path, safe_serialization=True)
            if tokenizer is not None:
                tokenizer.save_pretrained(path)
        dist.barrier()

    # ---- checkpoints ----------------------------------------------------------------------------
    def _trained_state(self) -> tuple[dict, dict]:
        """Model and optimizer state to checkpoint: all of it, or with LoRA only what trains."""
        model_state, optim_state = get_state_dict(self.model, self.optimizer or [])
        if self.lora_scaling is not None:
            trained = {name for name, p in self.model.named_parameters() if p.requires_grad}
            model_state = {k: v for k, v in model_state.items() if k in trained}
        return model_state, optim_state

    def save_checkpoint(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        model_state, optim_state = self._trained_state()
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=path)
        extra = {
            "scheduler": self.scheduler.state_dict() if self.scheduler else None,
            "rng": _rng_state(),
        }
        torch.save(extra, os.path.join(path, f"extra_rank{self.rank}.pt"))
        if self.rank == 0:
            # What model_merger needs to rebuild the Hugging Face model from the shards.
            hf_config = copy.deepcopy(self.hf_config)
            hf_config.architectures = [self._hf_class.__name__]
            hf_config.save_pretrained(os.path.join(path, HF_CONFIG_DIR))
            if self.lora_scaling is not None:
                # adapter_config.json: rank, alpha, targets and the base model's path, for model_merger
                self.model.peft_config["default"].save_pretrained(os.path.join(path, HF_CONFIG_DIR))
        dist.barrier()

    def load_checkpoint(self, path: str) -> None:
        model_state, optim_state = self._trained_state()
        state = {"model": model_state, "optim": optim_state}
        dcp.load(state, checkpoint_id=path)
        set_state_dict(
            self.model,
            self.optimizer or [],
            model_state_dict=state["model"],
            optim_state_dict=state["optim"],
            # with LoRA the checkpoint holds the adapters only; the base comes from model.path
            options=StateDictOptions(strict=self.lora_scaling is None),
        )
        extra = torch.load(os.path.join(path, f"extra_rank{self.rank}.pt"), weights_only=False)
        if self.scheduler is not None and extra["scheduler"] is not None:
            self.scheduler.load_state_dict(extra["scheduler"])
        _set_rng_state(extra["rng"])
        dist.barrier()


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated transformer blocks (each becomes one FSDP unit)."""
    layer_names = getattr(model, "_no_split_modules", None) or []
    return [m for m in model.modules() if type(m).__name__ in layer_names]


def _move_optimizer_state(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Move every tensor of the optimizer state (AdamW moments, step counts) to ``device``."""
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                state[key] = value.to(device)


def _rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
