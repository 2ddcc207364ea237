"""Where multi-agent metrics go: a local JSONL per run, evaluation JSON files, and W&B when configured."""

from __future__ import annotations

import json
import os
from typing import Any

from verl_lite.trainer.multi_agent.config import MultiAgentConfig

WANDB_RUN_KEYS = ("project", "entity", "name", "run_name", "tags", "dir", "config_sections")


class MetricsLogger:
    """Training metrics against ``env_step`` (gated by ``logging_steps``), evaluation metrics always.

    Files under ``args.output_dir``: ``metrics.jsonl`` (one line per log, ``kind`` train or eval) and
    ``eval/env_step_<n>.json`` (each evaluation's metrics dict).
    """

    def __init__(self, args: MultiAgentConfig, wandb_config: dict | None, tracker: Any = None):
        # a verl_lite Tracker (the Hydra mode): the run's loggers take every line instead of the own ones
        self.tracker = tracker
        self.args = args
        os.makedirs(args.output_dir, exist_ok=True)
        self._jsonl = None if tracker else open(os.path.join(args.output_dir, "metrics.jsonl"), "a")
        self._last_logged: int | None = None
        self.verbose = False
        self.run = None
        self._wandb_config = wandb_config
        # the W&B run id to continue (a resumed checkpoint's), or None for a new run
        self._wandb_id: str | None = None
        if wandb_config:
            unknown = sorted(set(wandb_config) - set(WANDB_RUN_KEYS))
            if unknown:
                raise ValueError(f"wandb_config has unknown keys {unknown}; valid: {list(WANDB_RUN_KEYS)}.")
            sections = dict(wandb_config.get("config_sections") or {})
            self.verbose = bool((sections.get("output") or {}).get("verbose", False))

    def _open_wandb(self) -> None:
        """Start the W&B run at the first log: a new one, or the resumed checkpoint's run id continued."""
        import wandb

        cfg = self._wandb_config
        self.run = wandb.init(
            project=cfg.get("project"),
            entity=cfg.get("entity"),
            name=cfg.get("name") or cfg.get("run_name"),
            tags=cfg.get("tags"),
            dir=cfg.get("dir") or self.args.output_dir,
            config={"trainer": _plain(self.args), **dict(cfg.get("config_sections") or {})},
            id=self._wandb_id,
            resume="allow" if self._wandb_id else None,
        )
        self.run.define_metric("env_step")
        self.run.define_metric("*", step_metric="env_step")

    def log_train(self, metrics: dict[str, float], env_step: int) -> bool:
        """Log when at least ``logging_steps`` env steps passed since the last training log; True if logged."""
        if self._last_logged is not None and env_step - self._last_logged < self.args.logging_steps:
            return False
        self._last_logged = env_step
        self._write("train", metrics, env_step)
        return True

    def log_rollout(self, metrics: dict[str, float], env_step: int) -> None:
        """Log ``metrics_callback``'s training values (every task, whatever ``logging_steps`` says)."""
        if metrics:
            self._write("rollout", metrics, env_step)

    def log_eval(self, metrics: dict[str, float], env_step: int, records: dict[str, Any]) -> str:
        """Log an evaluation and save its metrics dict as ``eval/env_step_<n>.json``; returns that path."""
        self._write("eval", metrics, env_step)
        path = os.path.join(self.args.output_dir, "eval", f"env_step_{env_step}.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(
                json.dumps({"env_step": env_step, "metrics": metrics, **records}, indent=2, default=str)
                + "\n"
            )
        return path

    def _write(self, kind: str, metrics: dict[str, float], env_step: int) -> None:
        if self.tracker is not None:
            self.tracker.log({"env_step": float(env_step), **metrics}, step=env_step)
            return
        self._jsonl.write(json.dumps({"kind": kind, "env_step": env_step, **metrics}) + "\n")
        self._jsonl.flush()
        if self._wandb_config:
            if self.run is None:
                self._open_wandb()
            self.run.log({"env_step": env_step, **metrics})
        if self.verbose:
            shown = " ".join(
                f"{k}={v:.3f}" for k, v in metrics.items() if "reward_mean" in k or k.startswith("eval/")
            )
            print(f"[{kind} env_step {env_step}] {shown}", flush=True)

    def state_dict(self) -> dict[str, Any]:
        """Where logging stands: the last training log's env step, the local file's length and the W&B
        run id (None before the first W&B log)."""
        return {
            "last_logged": self._last_logged,
            "jsonl_bytes": self._jsonl.tell() if self._jsonl is not None else None,
            "wandb_run_id": self.run.id if self.run is not None else self._wandb_id,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; lines a crashed run wrote after it are cut from ``metrics.jsonl``
        (the resumed run writes them again). W&B continues the checkpoint's run (lines it got after the
        checkpoint cannot be taken back there)."""
        self._last_logged = state["last_logged"]
        size = state["jsonl_bytes"]
        # a file shorter than the checkpoint's (another output_dir) is kept: truncate would pad it with zeros
        if self._jsonl is not None and size is not None and os.path.getsize(self._jsonl.name) > size:
            self._jsonl.truncate(size)
        saved = state.get("wandb_run_id")  # absent in checkpoints written before it was saved
        if self.run is not None and self.run.id != saved:  # another run's checkpoint: log to that run
            self.run.finish()
            self.run = None
        self._wandb_id = saved

    def finish(self) -> None:
        """Close the local file and the W&B run."""
        if self._jsonl is not None:
            self._jsonl.close()
        if self.run is not None:
            self.run.finish()


def _plain(args: MultiAgentConfig) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(args)
