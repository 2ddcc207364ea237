"""Load a user reward function from a python file and tell its two calling forms apart.

Per-sample form, called once per response (keyword arguments)::

    def compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs) -> float | dict

Batch form, called once for all responses of a step. It is recognised by a parameter named
``batch_items``: a list with one dict per response holding ``data_source``, ``prompt`` (the
templated prompt text), ``completion`` and ``solution_str`` (both the decoded response),
``ground_truth``, ``extra_info``, ``response_length``, ``row`` (the untouched dataset row) and every
column of that row (the standard keys win over same-named columns). It returns one float or dict
per item, in order::

    def compute_scores(batch_items, **kwargs) -> list[float | dict]
    def compute_scores(completions, *, batch_items) -> list[float | dict]   # comlrl style

In the second spelling the one other required parameter receives the list of completion strings.
``**kwargs`` (or named parameters) receive ``reward.reward_kwargs``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verl_lite.utils.extensions import function_from_file

__all__ = [
    "BATCH_PARAM",
    "SAMPLE_PARAMS",
    "batch_positional_params",
    "is_batch_reward_fn",
    "load_custom_reward_fn",
]

# name of the parameter that marks the batch form
BATCH_PARAM = "batch_items"
# keywords the per-sample form is called with
SAMPLE_PARAMS = ("data_source", "solution_str", "ground_truth", "extra_info")


def is_batch_reward_fn(fn: Callable[..., Any]) -> bool:
    """True when ``fn`` has a parameter named ``batch_items`` (the batch form)."""
    return BATCH_PARAM in inspect.signature(fn).parameters


def batch_positional_params(fn: Callable[..., Any]) -> list[str]:
    """Required positional parameters of a batch-form ``fn`` other than ``batch_items``."""
    return [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.name != BATCH_PARAM
        and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        and p.default is p.empty
    ]


def load_custom_reward_fn(path: str | Path, name: str = "compute_score") -> Callable[..., Any]:
    """Import the python file at ``path`` and return its function ``name``, after checking its signature.

    The file runs as a private module (see ``function_from_file``): two files with the same stem
    never collide and the function pickles by value (it can ship to Ray workers).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the file defines no callable ``name`` (the message lists the ones it has), or the
            function fits neither calling form.
    """
    file = Path(path).expanduser()
    fn = function_from_file(file, name, "reward.custom_reward_function")
    _check_signature(fn, f"{name} in {str(file)!r}")
    return fn


def _check_signature(fn: Callable[..., Any], where: str) -> None:
    """Raise ValueError when ``fn`` cannot be called in the form its parameters announce."""
    params = inspect.signature(fn).parameters
    if is_batch_reward_fn(fn):
        extra = batch_positional_params(fn)
        if len(extra) > 1:
            raise ValueError(
                f"batch reward function {where} has required parameters {extra}; besides batch_items it "
                "may take at most one (the list of completions)."
            )
        return
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    missing = [p for p in SAMPLE_PARAMS if p not in params and not takes_any]
    if missing:
        raise ValueError(
            f"reward function {where} lacks parameter(s) {missing}; the per-sample form is "
            "fn(data_source, solution_str, ground_truth, extra_info, **kwargs), the batch form has a "
            "parameter named batch_items."
        )
