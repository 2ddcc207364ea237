"""Write reasoning-gym generators' rows as parquet prompt files (``data.reasoning_gym``), before Ray starts.

reasoning-gym (https://github.com/open-thought/reasoning-gym) generates procedural reasoning tasks
offline: no download, the same rows for the same seed. Each generator named in
``data.reasoning_gym.generators`` gets a share of ``train_size`` and ``val_size`` rows by its weight;
a row's ``data_source`` is ``reasoning_gym/<generator>``, so validation reports every generator on
its own line and the scorer (``verl_lite/reward/scorers/reasoning_gym.py``) scores it with the
generator's own ``score_answer``. The entry that scorer needs travels in ``extra_info.entry`` (JSON).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DATA_SOURCE_PREFIX",
    "ReasoningGymConfig",
    "reasoning_gym_problems",
    "split_sizes",
    "write_reasoning_gym_files",
]

DATA_SOURCE_PREFIX = "reasoning_gym/"


@dataclass
class ReasoningGymConfig:
    """Which reasoning-gym generators to train and validate on, and how many rows of each."""

    # Generators mixed into the rows, name -> weight (share of the rows); empty = off.
    generators: dict[str, float] = field(default_factory=dict)
    # Keyword arguments of a generator's config (difficulty ranges ...), name -> {key: value}.
    generator_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Training rows generated in all (split among the generators by weight).
    train_size: int = 256
    # Validation rows generated in all (split the same way; another seed, so other rows).
    val_size: int = 64
    # Seed of the generated rows.
    seed: int = 1
    # reasoning-gym system prompt put before every question (a name in reasoning_gym.utils.SYSTEM_PROMPTS; null = none).
    system_prompt: str | None = "default"


def reasoning_gym_problems(cfg: ReasoningGymConfig, train_files: Any, val_files: Any) -> list[str]:
    """One sentence per problem of ``data.reasoning_gym`` (empty when it is off or fine)."""
    if not cfg.generators:
        return []
    try:
        from reasoning_gym.factory import DATASETS
        from reasoning_gym.utils import SYSTEM_PROMPTS
    except ImportError:
        return [
            "data.reasoning_gym.generators is set but reasoning_gym is not installed; pip install 'verl-lite[envs]'."
        ]
    out = []
    unknown = sorted(set(cfg.generators) - set(DATASETS))
    if unknown:
        out.append(
            f"data.reasoning_gym.generators names unknown generator(s) {unknown}; see reasoning_gym.factory.DATASETS."
        )
    bad_weights = {k: w for k, w in cfg.generators.items() if not isinstance(w, int | float) or w <= 0}
    if bad_weights:
        out.append(f"data.reasoning_gym.generators weights {bad_weights} must be positive numbers.")
    stray = sorted(set(cfg.generator_kwargs) - set(cfg.generators))
    if stray:
        out.append(
            f"data.reasoning_gym.generator_kwargs names {stray}, which are not in data.reasoning_gym.generators."
        )
    for key in ("train_size", "val_size"):
        value = getattr(cfg, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < len(cfg.generators):
            out.append(
                f"data.reasoning_gym.{key}={value!r} must be an integer of at least the number of generators "
                f"({len(cfg.generators)})."
            )
    if cfg.system_prompt is not None and cfg.system_prompt not in SYSTEM_PROMPTS:
        out.append(
            f"data.reasoning_gym.system_prompt={cfg.system_prompt!r} is not valid; use null or one of {sorted(SYSTEM_PROMPTS)}."
        )
    for key, files in (("data.train_files", train_files), ("data.val_files", val_files)):
        if files:
            out.append(
                f"{key}={files!r} must be null when data.reasoning_gym.generators is set (it writes both)."
            )
    return out


def split_sizes(weights: dict[str, float], total: int) -> dict[str, int]:
    """``total`` rows shared among the generators by weight: each gets at least 1, the sizes sum to ``total``.

    Largest-remainder rounding, so e.g. weights ``{a: 1, b: 2}`` and 10 rows give ``{a: 3, b: 7}``.
    """
    scale = sum(weights.values())
    exact = {n: total * w / scale for n, w in weights.items()}
    sizes = {n: max(1, int(x)) for n, x in exact.items()}
    for name in sorted(weights, key=lambda n: (sizes[n] - exact[n], n))[
        : max(0, total - sum(sizes.values()))
    ]:
        sizes[name] += 1
    # the floor of 1 can overshoot; the largest shares give the rows back
    while sum(sizes.values()) > total:
        sizes[max(sizes, key=sizes.get)] -= 1
    return sizes


def write_reasoning_gym_files(cfg: ReasoningGymConfig, out_dir: str) -> tuple[str, str]:
    """Generate the training and validation rows and write them; returns ``(train.parquet, val.parquet)``."""
    import pandas as pd

    os.makedirs(out_dir, exist_ok=True)
    paths = []
    # the validation rows come from the next seed, so they are other rows than the training ones
    for split, total, seed in (("train", cfg.train_size, cfg.seed), ("val", cfg.val_size, cfg.seed + 1)):
        rows = []
        for name, size in split_sizes(cfg.generators, total).items():
            rows += _rows(cfg, name, size, seed, split)
        path = os.path.join(out_dir, f"{split}.parquet")
        pd.DataFrame(rows).to_parquet(path)
        paths.append(path)
    return paths[0], paths[1]


def _rows(cfg: ReasoningGymConfig, name: str, size: int, seed: int, split: str) -> list[dict[str, Any]]:
    """``size`` rows of generator ``name`` in the RL prompt schema."""
    import reasoning_gym
    from reasoning_gym.utils import SYSTEM_PROMPTS

    dataset = reasoning_gym.create_dataset(name, size=size, seed=seed, **cfg.generator_kwargs.get(name, {}))
    system = (
        []
        if cfg.system_prompt is None
        else [{"role": "system", "content": SYSTEM_PROMPTS[cfg.system_prompt]}]
    )
    return [
        {
            "data_source": DATA_SOURCE_PREFIX + name,
            "prompt": [*system, {"role": "user", "content": entry["question"]}],
            "ability": "reasoning",
            "reward_model": {"style": "rule", "ground_truth": str(entry["answer"])},
            "extra_info": {"split": split, "index": index, "entry": json.dumps(entry, default=str)},
        }
        for index, entry in enumerate(dataset)
    ]
