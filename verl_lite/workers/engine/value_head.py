"""A scalar value head on a causal LM's body: the critic of an actor that shares the policy's weights.

The head is the model's ``value_head`` submodule, so the engine shards, optimises and checkpoints it with the
body. It never reaches the rollout (``weights_to_sync``) nor a Hugging Face export's weights: an export writes
it beside them as ``value_head.pt`` (its ``state_dict``, to load into :class:`ValueHead`).
"""

from __future__ import annotations

import torch
from torch import nn

VALUE_HEAD = "value_head"
VALUE_HEAD_FILE = "value_head.pt"


class ValueHead(nn.Module):
    """Last hidden state -> one value per position: a linear layer, or a tanh layer of ``hidden_dim`` first."""

    def __init__(self, hidden_size: int, hidden_dim: int | None = None):
        super().__init__()
        layers: list[nn.Module] = []
        if hidden_dim:
            layers += [nn.Linear(hidden_size, hidden_dim), nn.Tanh()]
        layers.append(nn.Linear(hidden_dim or hidden_size, 1))
        self.layers = nn.Sequential(*layers)
        for layer in self.layers:
            if isinstance(
                layer, nn.Linear
            ):  # small weights: the first values are near 0, as the rewards start
                nn.init.normal_(layer.weight, std=0.02)
                nn.init.zeros_(layer.bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """(batch, seq, hidden) -> (batch, seq, 1)."""
        return self.layers(hidden_states)


def attach_value_head(model: nn.Module, hidden_dim: int | None) -> ValueHead:
    """Add a fresh :class:`ValueHead` to ``model`` as its ``value_head`` submodule; returns it."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    head = ValueHead(config.hidden_size, hidden_dim)
    setattr(model, VALUE_HEAD, head)
    return head


def is_value_head(name: str) -> bool:
    """Whether a model parameter or state name belongs to the value head."""
    return name.startswith(f"{VALUE_HEAD}.")


def split_value_head(
    state: dict[str, torch.Tensor],
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``state`` without the head's tensors, and the head's own ``state_dict`` (names inside the head)."""
    head = {name.removeprefix(f"{VALUE_HEAD}."): t for name, t in state.items() if is_value_head(name)}
    return {name: t for name, t in state.items() if not is_value_head(name)}, head
