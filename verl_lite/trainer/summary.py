"""The end-of-run report: a table of first/last/best values and a reward-curve picture."""

from __future__ import annotations

from typing import Any

SUMMARY_KEYS = (
    "critic/score/mean",
    "critic/acc/mean",
    "response_length/mean",
    "actor/pg_loss",
    "actor/entropy",
    "timing_s/step",
    "perf/throughput",
)


def summary_table(history: list[dict[str, Any]]) -> str:
    """Plain-text table of the key metrics at the first and last step (and validation accuracy)."""
    keys = [k for k in SUMMARY_KEYS if any(k in h for h in history)]
    keys += sorted({k for h in history for k in h if k.startswith("val-core/")})
    lines = [f"{'metric':<40} {'first':>10} {'last':>10}", "-" * 62]
    for key in keys:
        values = [h[key] for h in history if key in h]
        lines.append(f"{key:<40} {values[0]:>10.4f} {values[-1]:>10.4f}")
    return "\n".join(lines)


def accuracy_headline(history: list[dict[str, Any]]) -> str | None:
    """One line per validation metric: its value before training and after the last step."""
    lines = []
    for key in sorted({k for h in history for k in h if k.startswith("val-core/") and "/mean@" in k}):
        points = [(h["step"], h[key]) for h in history if key in h]
        if len(points) >= 2:
            (first_step, first), (last_step, last) = points[0], points[-1]
            lines.append(
                f"{key}: {first:.3f} at step {first_step} -> {last:.3f} at step {last_step} "
                f"({100 * (last - first):+.1f} points)"
            )
    return "\n".join(lines) or None


def write_reward_curve(history: list[dict[str, Any]], path: str) -> None:
    """Plot mean reward and validation accuracy against step into ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    train = [(h["step"], h["critic/score/mean"]) for h in history if "critic/score/mean" in h]
    if train:
        ax.plot(*zip(*train), label="train reward (mean score)")
    for key in sorted({k for h in history for k in h if k.startswith("val-core/") and "/mean@" in k}):
        points = [(h["step"], h[key]) for h in history if key in h]
        ax.plot(*zip(*points), marker="o", label=key)
    ax.set_xlabel("step")
    ax.set_ylabel("reward / accuracy")
    ax.grid(alpha=0.3)
    if ax.lines:  # a run that logged no reward or accuracy draws empty axes, without a legend
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
