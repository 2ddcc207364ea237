"""Pre-Ray checks of what the data rows ask for: lengths, each row's agent loop, prompts that fit.

Part of ``validate_config`` (``trainer/validation.py``): every problem is one sentence naming the key, its
value and what would be valid, found before Ray starts instead of inside a worker 20-60 s later.
"""

from __future__ import annotations

import os
from typing import Any

from verl_lite.trainer.config import PPOConfig

# How many offending rows an agent_name problem quotes.
_QUOTED_ROWS = 3


def data_files(config: PPOConfig) -> list[tuple[str, str]]:
    """(key, path) of every training and validation data file."""
    out = []
    for key, value in (
        ("data.train_files", config.data.train_files),
        ("data.val_files", config.data.val_files),
    ):
        paths = [] if value is None else [value] if isinstance(value, str) else list(value)
        out += [(key, path) for path in paths]
    return out


def length_problems(config: PPOConfig) -> list[str]:
    """``data.max_prompt_length`` / ``max_response_length`` are positive token counts; the rollout wait bound."""
    out = []
    for key, value in (
        ("data.max_prompt_length", config.data.max_prompt_length),
        ("data.max_response_length", config.data.max_response_length),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            out.append(f"{key}={value!r} is not valid; use a positive number of tokens.")
    timeout = config.actor_rollout_ref.rollout.agent.generate_timeout_s
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
    ):
        out.append(
            f"actor_rollout_ref.rollout.agent.generate_timeout_s={timeout!r} is not valid; use a positive "
            "number of seconds, or null for no bound."
        )
    return out


def agent_name_problems(config: PPOConfig) -> list[str]:
    """``data.agent_name``, else every row's ``agent_name``, names a registered agent loop (verl's names count
    as their equivalents)."""
    from verl_lite.data.files import DataFileError, read_column
    from verl_lite.workers.agent_loop import AGENT_LOOPS
    from verl_lite.workers.agent_loop.base import VERL_AGENT_NAMES, agent_loop_name

    valid = ", ".join([*AGENT_LOOPS.names(), *(f"{v} (verl: {k})" for k, v in VERL_AGENT_NAMES.items())])
    forced = config.data.agent_name
    if forced is not None:
        if agent_loop_name(forced) in AGENT_LOOPS:
            return []
        return [f"data.agent_name={forced!r} is not a registered agent loop; known: {valid}."]
    out = []
    for key, path in data_files(config):
        try:
            names = read_column(path, "agent_name", key)
        except DataFileError:
            continue  # reported by the data-row checks
        bad: dict[str, list[int]] = {}
        for row, name in enumerate(names or []):
            if name is not None and agent_loop_name(name) not in AGENT_LOOPS:
                bad.setdefault(name, []).append(row)
        for name, rows in bad.items():
            quoted = ", ".join(map(str, rows[:_QUOTED_ROWS])) + (", ..." if len(rows) > _QUOTED_ROWS else "")
            out.append(
                f"{key}: {len(rows)} row(s) of {path!r} (rows {quoted}) have agent_name={name!r}, which is not "
                f"a registered agent loop; known: {valid} (register others with trainer.extensions)."
            )
    return out


def overlong_prompt_problems(config: PPOConfig, tokenizer: Any = None) -> list[str]:
    """A file whose every usable prompt is longer than ``data.max_prompt_length`` (and so filtered out).

    Stops at the first prompt that fits, so a usable file costs a few tokenizations.
    """
    from transformers import AutoTokenizer

    from verl_lite.data.files import DataFileError, read_column
    from verl_lite.data.rl_dataset import render_prompt, row_skip_reason

    data = config.data
    if not data.filter_overlong_prompts:
        return []  # long prompts are truncated (or fail naming the key) instead
    model = config.model
    out = []
    for key, path in data_files(config):
        try:
            prompts = read_column(path, data.prompt_key, key) or []
            rewards = read_column(path, "reward_model", key) or [None] * len(prompts)
        except DataFileError:
            continue  # reported by the data-row checks
        usable = [
            p
            for p, r in zip(prompts, rewards)
            if row_skip_reason({data.prompt_key: p, "reward_model": r}, data.prompt_key) is None
        ]
        if not usable:
            continue  # reported by the data-row checks
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(
                model.tokenizer_path or model.path, trust_remote_code=model.trust_remote_code
            )
        shortest = None
        for prompt in usable:
            length = len(render_prompt(tokenizer, prompt)[1])
            if length <= data.max_prompt_length:
                break
            shortest = length if shortest is None else min(shortest, length)
        else:
            out.append(
                f"{key}: 0 usable rows in {os.path.basename(path)!r}: all {len(usable)} prompts are longer than "
                f"data.max_prompt_length={data.max_prompt_length} tokens (the shortest is {shortest}); raise "
                "data.max_prompt_length, or set data.filter_overlong_prompts=false with data.truncation=left|right."
            )
    return out
