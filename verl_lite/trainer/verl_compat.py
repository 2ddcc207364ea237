"""Decide what happens to verl command-line keys that verl_lite accepts without using them.

verl's example scripts set keys verl_lite has no use for (``use_liger``, ``multi_turn.enable`` ...),
and verl values of keys verl_lite shares (``rollout.mode=async``, see :data:`VERL_VALUES`).
``configs/verl_compat.yaml`` gives each a place at verl's path, so Hydra takes the override;
:data:`VERL_KEYS` below says, per key, which values pass silently, which pass with a one-line
notice of what verl_lite does instead, and which are refused with the verl_lite equivalent.
:func:`drop_verl_keys` applies that and removes the keys before the typed config is built.

verl keys that verl_lite implements (``fsdp_config.param_offload``, ``ref.log_prob_micro_batch_size_per_gpu``,
``rollout.tensor_model_parallel_size`` ...) are ordinary keys of the yaml and dataclasses, not listed here;
docs/migrating_from_verl.md covers both kinds.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from verl_lite.trainer.validation import ConfigError


@dataclass(frozen=True)
class VerlKey:
    """One verl key verl_lite takes from the command line and then drops.

    A value in ``quiet`` asks for nothing verl_lite lacks and passes silently. Any other value
    passes with the notice ``instead`` when ``noticed`` is None or holds it; otherwise it is
    refused with ``refusal`` (a sentence naming what to use in verl_lite).
    """

    path: str
    quiet: tuple[Any, ...]
    instead: str = ""
    noticed: tuple[Any, ...] | None = None
    refusal: str = ""
    # (path, value) pairs of verl_lite keys a noticed value sets (the verl_lite way to ask for the same)
    sets: tuple[tuple[str, Any], ...] = ()

    def treatment(self, value: Any) -> str:
        """``"quiet"``, ``"notice"`` or ``"refused"`` for ``value``."""
        if value in self.quiet:
            return "quiet"
        if self.noticed is None or value in self.noticed:
            return "notice"
        return "refused"


VERL_KEYS = (
    VerlKey(
        "data.return_raw_chat",
        quiet=(False,),
        instead="not needed; the reward always gets the templated prompt text (raw_prompt) and the "
        "rollout works on token ids.",
    ),
    VerlKey(
        "actor_rollout_ref.model.use_liger",
        quiet=(False,),
        instead="not used; verl_lite runs the model's own Hugging Face kernels.",
    ),
    VerlKey(
        "actor_rollout_ref.model.use_fused_kernels",
        quiet=(False,),
        instead="not used; verl_lite computes log-probs from logits of the response positions only.",
    ),
    VerlKey(
        "actor_rollout_ref.rollout.multi_turn.enable",
        quiet=(False,),
        instead="verl_lite picks the agent loop per row (an agent_name column) or by "
        "actor_rollout_ref.rollout.agent.default_agent_loop; true sets that to tool_agent.",
        noticed=(True,),
        refusal="is not a boolean; leave it false or choose the agent loop with "
        "actor_rollout_ref.rollout.agent.default_agent_loop.",
        sets=(("actor_rollout_ref.rollout.agent.default_agent_loop", "tool_agent"),),
    ),
)

# verl values of keys verl_lite also has, with the verl_lite value they mean and why.
VERL_VALUES = {
    "actor_rollout_ref.rollout.mode": {
        "sync": ("hybrid", "rollout servers in the actor's processes (verl_lite has no batch rollout)."),
        "async": (
            "hybrid",
            "verl_lite's rollout is always servers driven by agent loops, here in the actor's processes.",
        ),
    },
}


def drop_verl_keys(cfg: Any) -> tuple[DictConfig, list[str]]:
    """``cfg`` without the :data:`VERL_KEYS`, and one notice per key set to a noticed value.

    Raises ``ConfigError`` listing every refused value at once. ``cfg`` itself is not changed.
    """
    cfg = copy.deepcopy(cfg) if OmegaConf.is_config(cfg) else OmegaConf.create(cfg)
    notices, problems = [], []
    with open_dict(cfg):
        for key in VERL_KEYS:
            parent_path, _, leaf = key.path.rpartition(".")
            parent = OmegaConf.select(cfg, parent_path)
            if parent is None or leaf not in parent:
                continue
            value = parent.pop(leaf)
            treatment = key.treatment(value)
            if treatment == "notice":
                notices.append(f"{key.path}={value}: {key.instead}")
                for path, wanted in key.sets:
                    OmegaConf.update(cfg, path, wanted, merge=False)
            elif treatment == "refused":
                problems.append(f"{key.path}={value!r} {key.refusal}")
            _drop_if_empty(cfg, parent_path)
        for path, aliases in VERL_VALUES.items():
            value = OmegaConf.select(cfg, path)
            if value in aliases:
                ours, why = aliases[value]
                OmegaConf.update(cfg, path, ours, merge=False)
                notices.append(f"{path}={value} (verl) runs as {ours}: {why}")
    if problems:
        raise ConfigError("invalid configuration:\n- " + "\n- ".join(problems))
    return cfg, notices


def _drop_if_empty(cfg: DictConfig, path: str) -> None:
    """Remove the group at ``path`` and then its parents while they hold no keys (``multi_turn``)."""
    while path and len(OmegaConf.select(cfg, path)) == 0:
        parent_path, _, leaf = path.rpartition(".")
        (OmegaConf.select(cfg, parent_path) if parent_path else cfg).pop(leaf)
        path = parent_path
