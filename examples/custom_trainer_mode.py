"""A custom trainer mode: the sync loop plus a smoothed training reward, registered as ``score_ema``.

A trainer mode is a ``PPOTrainer`` subclass that changes behaviour through the ``on_*`` hooks
(``on_train_begin``, ``on_step_begin``, ``on_sample_end``, ``on_step_end``, ``on_validate_begin``,
``on_validate_end``, ``on_train_end``); the step itself stays in ``PPOTrainer.train_step``.
Select it by name (the file is imported in the driver and the controller, where the trainer runs)::

    python -m verl_lite.main_ppo trainer.extensions=[examples/custom_trainer_mode.py] trainer.mode=score_ema

Every step then logs ``trainer_mode/score_ema`` = decay * previous + (1 - decay) * critic/score/mean.
"""

from __future__ import annotations

from verl_lite.trainer.ppo.trainer_base import PPOTrainer, register_trainer


@register_trainer("score_ema")
class ScoreEMATrainer(PPOTrainer):
    """Adds an exponential moving average of the training score to every step's metrics."""

    decay = 0.9

    def on_train_begin(self) -> None:
        self.score_ema: float | None = None
        super().on_train_begin()

    def on_step_end(self, step: int, metrics: dict[str, float]) -> None:
        score = metrics.get("critic/score/mean")
        if score is not None:
            previous = score if self.score_ema is None else self.score_ema
            self.score_ema = self.decay * previous + (1 - self.decay) * score
            metrics["trainer_mode/score_ema"] = self.score_ema
        super().on_step_end(step, metrics)  # validates on schedule and logs the metrics
