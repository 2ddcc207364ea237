"""Example custom reward functions: a per-sample one and a batch one.

Select the per-sample function (works with the ``naive`` and ``dapo`` managers)::

    python -m verl_lite.main_ppo \
        reward.custom_reward_function.path=examples/custom_reward.py \
        reward.custom_reward_function.name=compute_score

Select the batch function (called once per step with every response; needs the ``batch`` manager)::

    python -m verl_lite.main_ppo reward.reward_manager=batch \
        reward.custom_reward_function.path=examples/custom_reward.py \
        reward.custom_reward_function.name=compute_score_batch

Extra keyword arguments come from ``reward.reward_kwargs`` (e.g. ``+reward.reward_kwargs.length_bonus=0.2``).
A function is the batch form when it has a parameter named ``batch_items``; see
``verl_lite/reward/custom.py`` for the keys of each item. Run this file to check both functions.
"""

from __future__ import annotations

from typing import Any

from verl_lite.reward import default_compute_score


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    length_bonus: float = 0.0,
) -> dict[str, float]:
    """The built-in score for ``data_source``, plus a small bonus for short correct answers.

    Returns a dict: ``score`` is the reward, the other keys are logged as metrics.
    """
    base = default_compute_score(data_source, solution_str, ground_truth, extra_info)
    score = base["score"] if isinstance(base, dict) else float(base)
    short = len(solution_str) <= 200
    return {"score": score + (length_bonus if score > 0 and short else 0.0), "short": float(short)}


def compute_score_batch(batch_items: list[dict[str, Any]], length_bonus: float = 0.0) -> list[float]:
    """Reward each response, then give the shortest correct response of every prompt a bonus.

    Responses of one prompt share the same ``prompt`` text, so they can be compared with each other,
    which a per-sample function cannot do.
    """
    scores = []
    for item in batch_items:
        result = default_compute_score(
            item["data_source"], item["completion"], item["ground_truth"], item["extra_info"]
        )
        scores.append(result["score"] if isinstance(result, dict) else float(result))
    shortest: dict[str, int] = {}
    for i, item in enumerate(batch_items):
        best = shortest.get(item["prompt"])
        if scores[i] > 0 and (best is None or len(item["completion"]) < len(batch_items[best]["completion"])):
            shortest[item["prompt"]] = i
    for i in shortest.values():
        scores[i] += length_bonus
    return scores


if __name__ == "__main__":
    print(compute_score("synthetic_arith", "3+4=7\n#### 7", "7", length_bonus=0.2))
    items = [
        {
            "data_source": "synthetic_arith",
            "prompt": "p",
            "completion": c,
            "ground_truth": "7",
            "extra_info": {},
        }
        for c in ("#### 7", "3+4=7\n#### 7", "#### 8")
    ]
    print(compute_score_batch(items, length_bonus=0.2))
