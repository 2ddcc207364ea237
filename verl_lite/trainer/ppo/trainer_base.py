"""``PPOTrainer``: the controller's training loop as named steps, with hooks trainer modes override.

The controller only moves keys and tags: the prompts of a batch travel with the launch call to the
rollout, workers read and write every token tensor in the KV store themselves, and what comes back here
is ``KVBatchMeta`` and scalars.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, ClassVar

from verl_lite.algorithms import build_kl_controller, get_adv_estimator_needs
from verl_lite.kv import KVBatchMeta
from verl_lite.trainer.checkpoint import (
    CheckpointWriter,
    controller_rng_state,
    load_policies,
    load_trainer_state,
    prune_checkpoints,
    resolve_resume_path,
    restore_controller_rng,
    save_policies,
)
from verl_lite.trainer.config import PPOConfig
from verl_lite.trainer.generation_dump import generation_rows, write_generations
from verl_lite.trainer.ppo.balance import balance_by_length
from verl_lite.trainer.ppo.metrics import staleness_metrics, tag_metrics, validation_metrics
from verl_lite.trajectory import ROLLOUT_COLUMNS
from verl_lite.utils.metrics import reduce_metrics
from verl_lite.utils.registry import Registry
from verl_lite.workers.advantage import advantages_from_tags
from verl_lite.workers.agent_loop.manager import PendingSequences
from verl_lite.workers.agent_loop.worker import REQUESTS_RETRIED, REWARD_SECONDS, SERVER_RESTARTS, prompt_rows

TRAINERS: Registry[type] = Registry("trainer mode")


def register_trainer(name: str):
    """Class decorator: make a ``PPOTrainer`` subclass selectable by ``trainer.mode``."""
    return TRAINERS.register(name)


def get_trainer_cls(name: str) -> type[PPOTrainer]:
    """The trainer class registered under ``name`` (the error lists the known modes)."""
    return TRAINERS.get(name)


@dataclass
class WorkerGroups:
    """The worker groups a trainer drives (critic only when the estimator needs values)."""

    # the policy: actor (and reference) roles
    actor: Any
    # the rollout servers (colocated with the actor in the hybrid placement)
    rollout: Any
    # the agent-loop manager that turns prompt keys into stored trajectories through the servers
    agent_loop: Any
    # where the rollout servers run (verl_lite.trainer.placement): it built these groups and syncs weights
    placement: Any
    critic: Any = None
    # the RewardModel role, only with reward.reward_model.enable
    reward_model: Any = None
    # whether the actor's model carries a value head (actor.value_head.enable) in place of a critic
    actor_value_head: bool = False

    @property
    def value_model(self) -> Any:
        """The group whose ``compute_values`` writes ``values``: the critic, or the actor with a value head
        (None when nothing learns values)."""
        if self.critic is not None:
            return self.critic
        return self.actor if self.actor_value_head else None

    def sync_weights(self, version: int, between_aborts: bool = False) -> dict[str, float]:
        """The actor's weights to every rollout server as ``version``; the servers' metrics, reduced."""
        return reduce_metrics(self.placement.sync_weights(self, version, between_aborts))


# ---- the step's pieces between sampling and the weight sync, on any policy's worker groups ----------
# PPOTrainer runs them on the run's policy, the multi-agent loop on each agent's, so both step the same way.
# Each adds the fields it wrote to ``batch.fields`` and returns its metrics, reduced; ``timed(name)`` (a
# context manager) times its worker calls under ``timing_s/<name>``.
Timer = Callable[[str], AbstractContextManager]


def untimed(name: str) -> AbstractContextManager:
    """The ``timed`` of a caller that logs no per-phase times."""
    return nullcontext()


def add_log_probs(
    actor: Any, config: PPOConfig, batch: KVBatchMeta, timed: Timer = untimed
) -> dict[str, float]:
    """Old log-probs (where ``config.recompute_old_log_prob``) and reference log-probs (where
    ``config.use_reference``) into the store; the old log-probs' metrics (the rollout's probability gap)."""
    metrics: dict[str, float] = {}
    if config.recompute_old_log_prob:
        with timed("old_log_prob"):
            scored = actor.compute_log_prob(batch)
        metrics.update(reduce_metrics([scored.metrics]))
        batch.fields = scored.fields
    if config.use_reference:
        with timed("ref"):
            batch.fields = actor.compute_ref_log_prob(batch).fields
    return metrics


def add_values(value_model: Any, batch: KVBatchMeta, timed: Timer = untimed) -> None:
    """The values of every token of ``batch`` into the store, from ``WorkerGroups.value_model``."""
    with timed("values"):
        batch.fields = value_model.compute_values(batch).fields


def add_advantages(
    actor: Any, batch: KVBatchMeta, algorithm: Any, kl_coef: float, timed: Timer = untimed
) -> dict[str, float]:
    """Token-level rewards (the scores, less ``kl_coef`` times the reference KL where the algorithm puts it
    in the reward), advantages and returns, computed by the actor's workers; their metrics."""
    with timed("adv"):
        records = actor.compute_advantage(batch, algorithm, kl_coef)
    batch.fields = sorted({*batch.fields, "token_level_rewards", "advantages", "returns"})
    return reduce_metrics([records])


def train_critic(critic: Any, batch: KVBatchMeta, timed: Timer = untimed) -> dict[str, float]:
    """One critic update on ``batch``; its metrics."""
    with timed("update_critic"):
        return reduce_metrics(critic.update_critic(batch))


def train_actor(actor: Any, batch: KVBatchMeta, timed: Timer = untimed) -> dict[str, float]:
    """One actor update on ``batch``; its metrics."""
    with timed("update_actor"):
        return reduce_metrics(actor.update_actor(batch))


class PPOTrainer:
    """Synchronous PPO/GRPO loop; subclasses change behaviour through the ``on_*`` hooks only."""

    # the rollout placement this mode runs on when rollout.mode is null; a mode that overlaps generation
    # and training says "standalone" and validation refuses it with any other (verl_lite.trainer.placement)
    placement: ClassVar[str] = "hybrid"
    # whether the rollout streams finished groups into the store while training runs, up to
    # trainer.replay_buffer.max_off_policy_threshold versions ahead (validation requires that bound), so
    # the replay buffer lists the store; otherwise every generation has ended before the step samples
    # and the buffer takes what it returned
    streams_rollout: ClassVar[bool] = False

    @staticmethod
    def config_problems(config: PPOConfig) -> list[str]:
        """Problems with the keys only this mode reads, one sentence each (validation, before Ray starts)."""
        return []

    def __init__(
        self,
        config: PPOConfig,
        groups: WorkerGroups,
        kv: Any,
        replay_buffer: Any,
        train_batches: Any,
        val_dataset: Any,
        tracker: Any,
    ):
        self.config = config
        self.groups = groups
        self.kv = kv
        self.buffer = replay_buffer
        self.train_batches = train_batches
        self.val_dataset = val_dataset
        self.tracker = tracker
        self.kl_ctrl = build_kl_controller(config.algorithm.kl_ctrl)
        self.global_step = 0
        self.total_steps = self._total_steps()
        self.timing: dict[str, float] = {}
        # the rollout's fault counters of the current step (requests resent, servers restarted)
        self.rollout_counts: dict[str, float] = {}
        self.history: list[dict[str, float]] = []
        self._submitted = 0
        # data source and ground truth of the prompt groups in flight, for the generation dumps
        self._group_info: dict[str, dict[str, Any]] = {}
        self.buffer.refill_fn = self.refill
        self.buffer.lists_store = self.streams_rollout
        # True while a checkpoint is written; stop_requested() (the TaskRunner's, on a signal) ends fit
        # before the next step
        self.saving = False
        self.stop_requested: Callable[[], bool] = lambda: False

    # ---- hooks ----------------------------------------------------------------------------------
    def on_train_begin(self) -> None:
        """Before the first step: validate when ``val_before_train`` (not again when resuming)."""
        trainer = self.config.trainer
        if trainer.val_only or (trainer.val_before_train and self.global_step == 0):
            metrics = self.validate()
            self.history.append({"step": self.global_step, **metrics})
            self.tracker.log(metrics, step=self.global_step)

    def on_step_begin(self, step: int) -> None:
        """Before a step starts generating."""

    def on_sample_end(self, batch: KVBatchMeta) -> KVBatchMeta:
        """After the replay buffer returned the step's trajectories; may reorder or filter them."""
        if self.config.trainer.balance_batch:
            return balance_by_length(batch, self.groups.actor.world_size)
        return batch

    def on_generate(self, step: int) -> None:
        """Have the step's prompt groups generated (sync: this step's prompts, with the current weights)."""
        self.generate(step, self.config.data.train_batch_size)

    def on_update_end(self, step: int, batch: KVBatchMeta) -> dict[str, float]:
        """After the updates: the new weights to the rollout (version = ``step``); returns the sync metrics."""
        with self.timed("update_weights"):
            return self.sync_weights(step)

    def on_step_end(self, step: int, metrics: dict[str, float]) -> None:
        """After the update and weight sync: validate on schedule, log, and checkpoint on schedule."""
        trainer = self.config.trainer
        last = step == self.total_steps
        if last or (trainer.test_freq > 0 and step % trainer.test_freq == 0):
            metrics.update(self.validate())
        self.history.append({"step": step, **metrics})
        if trainer.save_freq > 0 and (last or step % trainer.save_freq == 0):
            start = time.perf_counter()
            self.save_checkpoint(step)
            metrics["timing_s/save_checkpoint"] = time.perf_counter() - start
        self.tracker.log(metrics, step=step)

    def on_validate_begin(self) -> None:
        """Before validation generates."""

    def on_validate_end(self, metrics: dict[str, float]) -> None:
        """After validation metrics are computed."""

    def on_train_end(self) -> None:
        """After the last step."""
        self.tracker.finish(self.history)

    # ---- the loop -------------------------------------------------------------------------------
    def fit(self) -> list[dict[str, float]]:
        """Resume if a checkpoint says so, run to ``total_steps`` (or only validate); returns the step metrics."""
        self.resume()
        self.on_train_begin()
        if self.config.trainer.val_only:
            self.on_train_end()
            return self.history
        for step in self.tracker.progress(range(self.global_step + 1, self.total_steps + 1)):
            if self.stop_requested():  # a safe point: the last step is logged and checkpointed on schedule
                print(f"stop requested: stopping before step {step}", flush=True)
                break
            self.global_step = step
            self.on_step_begin(step)
            metrics = self.train_step(step)
            self.on_step_end(step, metrics)
        self.on_train_end()
        return self.history

    def train_step(self, step: int) -> dict[str, float]:
        """One step: generate → sample → log-probs → ref → values → advantages → updates → sync → clear."""
        self.timing = {}
        self.rollout_counts = {REQUESTS_RETRIED: 0.0, SERVER_RESTARTS: 0.0}
        start = time.perf_counter()
        with self.timed("gen"):
            self.on_generate(step)
        batch, metrics = self.buffer.sample(step, "train", self.config.data.train_batch_size)
        batch.samples_per_prompt = self.config.actor_rollout_ref.rollout.n
        batch.fields = list(ROLLOUT_COLUMNS)
        batch = self.on_sample_end(batch)
        metrics.update(self.score_and_estimate(batch))
        metrics.update(self.update(batch, step))
        metrics.update(self.on_update_end(step, batch))
        if self.config.trainer.rollout_data_dir:
            with self.timed("dump"):
                self.dump_generations(self.config.trainer.rollout_data_dir, step, batch)
        self.buffer.release(batch)
        self._forget_groups(batch.group_uids())
        self.timing["step"] = time.perf_counter() - start
        metrics.update(self.step_metrics(batch, step))
        return metrics

    def generate(self, step: int, num_prompts: int) -> None:
        """Put the next prompts in the store as pending groups and have the rollout workers sample them."""
        self.finish_generation(self.start_generation(step, num_prompts))

    def start_generation(self, step: int, num_prompts: int) -> PendingSequences:
        """``generate`` without the wait: the next prompts are submitted and the rollout starts on them."""
        items = next(self.train_batches)[:num_prompts]
        return self.launch(self.submit_prompts(items, step, "train"), items)

    def launch(self, meta: KVBatchMeta, items: list[dict]) -> PendingSequences:
        """Start the rollout of the prompt groups ``meta`` (dataset rows ``items``, which travel with it)."""
        # ReMax-style estimators also need each prompt's greedy response scored (its reward_baselines)
        needs = get_adv_estimator_needs(self.config.algorithm.adv_estimator)
        return self.groups.agent_loop.launch_sequences(
            meta, prompt_rows(items), greedy_baseline=needs.greedy_baseline
        )

    def finish_generation(self, pending: PendingSequences) -> None:
        """Wait for a started generation; hand its trajectories to the buffer, add its reward time and
        fault counters to this step's."""
        trajectories = self.groups.agent_loop.collect_sequences(pending)
        self.buffer.add_trajectories(trajectories)
        rolled = reduce_metrics([trajectories.metrics])
        # scoring happens inside the rollout: timing_s/gen includes it, timing_s/reward shows its share
        self.timing["reward"] = self.timing.get("reward", 0.0) + rolled.get(REWARD_SECONDS, 0.0)
        for name in self.rollout_counts:
            self.rollout_counts[name] += rolled.get(name, 0.0)

    def sync_weights(self, version: int) -> dict[str, float]:
        """The actor's weights to every rollout server as ``version`` (in place when colocated)."""
        return self.groups.sync_weights(version)

    def refill(self, num_prompts: int) -> None:
        """``refill_fn`` of the replay buffer: generate replacements for evicted groups."""
        self.generate(self.global_step, num_prompts)

    def submit_prompts(self, items: list[dict], step: int, partition: str) -> KVBatchMeta:
        """Register prompt groups with the buffer (as pending); their uids and tags.

        The prompts themselves travel with the launch call (:meth:`launch`), not through the store.
        """
        self._submitted += len(items)
        uids = [f"{partition}{step}-{self._submitted - len(items) + i}" for i in range(len(items))]
        self._group_info.update(
            {
                uid: {"data_source": it["data_source"], "ground_truth": it["ground_truth"]}
                for uid, it in zip(uids, items)
            }
        )
        return self.buffer.add_groups(
            uids, step, partition, tags=[{"data_source": it["data_source"]} for it in items]
        )

    def score_and_estimate(self, batch: KVBatchMeta) -> dict[str, float]:
        """Reward-model scores, old and reference log-probs, values, then advantages in the workers."""
        cfg, actor = self.config, self.groups.actor
        metrics: dict[str, float] = {}
        if self.groups.reward_model is not None:
            with self.timed("reward"):
                rm_scored = self.groups.reward_model.compute_rm_score(batch)
            batch.fields = rm_scored.fields
            metrics.update(reduce_metrics([rm_scored.metrics]))
        metrics.update(add_log_probs(actor, cfg, batch, self.timed))
        if self.groups.value_model is not None:
            add_values(self.groups.value_model, batch, self.timed)
        if self._advantages_from_tags(batch):
            with self.timed("adv"):
                advantages, records = advantages_from_tags(batch.tags, batch.group_ids(), cfg.algorithm)
            for tag, advantage in zip(batch.tags, advantages):
                tag["advantage"] = advantage
            metrics.update(reduce_metrics([records]))
        else:
            metrics.update(add_advantages(actor, batch, cfg.algorithm, self.kl_ctrl.value, self.timed))
        if cfg.algorithm.use_kl_in_reward and "actor/reward_kl_penalty/mean" in metrics:
            self.kl_ctrl.update(metrics["actor/reward_kl_penalty/mean"], len(batch))
            metrics["actor/reward_kl_penalty_coeff"] = self.kl_ctrl.value
        return metrics

    def _advantages_from_tags(self, batch: KVBatchMeta) -> bool:
        """Whether this step's advantages follow from the tags' scores alone: a sequence-level estimator
        (GRPO, RLOO, ...) and no token-level change to the scores (in-reward KL, a reward model)."""
        algorithm = self.config.algorithm
        return (
            get_adv_estimator_needs(algorithm.adv_estimator).sequence_level
            and not algorithm.use_kl_in_reward
            and self.groups.reward_model is None
            and all("score" in tag and "sampled_len" in tag for tag in batch.tags)
        )

    def update(self, batch: KVBatchMeta, step: int) -> dict[str, float]:
        """Critic update, then (after ``critic_warmup``) the actor update."""
        metrics: dict[str, float] = {}
        if self.groups.critic is not None:
            metrics.update(train_critic(self.groups.critic, batch, self.timed))
        if step > self.config.trainer.critic_warmup:
            metrics.update(train_actor(self.groups.actor, batch, self.timed))
        return metrics

    def validate(self) -> dict[str, float]:
        """Greedy (``val_kwargs``) generation on the validation prompts; accuracy per data source."""
        if self.val_dataset is None or len(self.val_dataset) == 0:
            return {}
        self.on_validate_begin()
        items = [self.val_dataset[i] for i in range(len(self.val_dataset))]
        # data.val_batch_size prompts per generate call bounds what the rollout holds at once.
        size = self.config.data.val_batch_size or len(items)
        prompts, trajectories = [], []
        for begin in range(0, len(items), size):
            chunk = items[begin : begin + size]
            prompts.append(self.submit_prompts(chunk, self.global_step, "val"))
            trajectories.append(
                self.groups.agent_loop.generate_sequences(prompts[-1], prompt_rows(chunk), validate=True)
            )
        meta, out = KVBatchMeta.concat(prompts), KVBatchMeta.concat(trajectories)
        n = self.config.actor_rollout_ref.rollout.val_kwargs.n
        by_uid = {tag["uid"]: tag.get("data_source") for tag in meta.tags}
        tags = [{**tag, "data_source": by_uid.get(tag["uid"], "unknown")} for tag in out.tags]
        metrics = validation_metrics(tags, n)
        if self.config.trainer.validation_data_dir:
            self.dump_generations(self.config.trainer.validation_data_dir, self.global_step, out)
        self.buffer.release(out)
        self._forget_groups(meta.keys)
        self.on_validate_end(metrics)
        return metrics

    def dump_generations(self, directory: str, step: int, trajectories: KVBatchMeta) -> str:
        """Write ``trajectories`` (decoded by the rollout workers) to ``directory/<step>.jsonl``."""
        texts = self.groups.agent_loop.decode_trajectories(trajectories)
        rows = generation_rows(step, trajectories.keys, trajectories.tags, texts, self._group_info)
        return write_generations(directory, step, rows)

    def _forget_groups(self, uids: list[str]) -> None:
        for uid in uids:
            self._group_info.pop(uid, None)

    # ---- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The controller's share of a checkpoint: everything the next step depends on besides the workers."""
        return {
            "global_step": self.global_step,
            "dataloader": self.train_batches.state_dict(),
            "kl_ctrl": self.kl_ctrl.state_dict(),
            "replay_buffer": self.buffer.state_dict(),
            "submitted": self._submitted,
            "history": self.history,
            "rng": controller_rng_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.global_step = int(state["global_step"])
        self.train_batches.load_state_dict(state["dataloader"])
        self.kl_ctrl.load_state_dict(state["kl_ctrl"])
        self.buffer.load_state_dict(state["replay_buffer"])
        self._submitted = int(state["submitted"])
        self.history = list(state["history"])
        restore_controller_rng(state["rng"])

    def save_checkpoint(self, step: int) -> str:
        """Workers write their shards, the controller its state; published atomically, old ones pruned."""
        trainer = self.config.trainer
        writer = CheckpointWriter(trainer.checkpoint_dir, step)
        self.saving = True  # a stop request waits for the publish (trainer/stopping.py)
        try:
            save_policies(writer, self.policies())
            writer.save_trainer_state(self.state_dict())
            path = writer.publish()
        finally:
            self.saving = False
        prune_checkpoints(trainer.checkpoint_dir, trainer.max_ckpt_to_keep)
        return path

    def resume(self) -> str | None:
        """Load the checkpoint ``trainer.resume_mode`` points at (if any); returns its path."""
        trainer = self.config.trainer
        path = resolve_resume_path(trainer.resume_mode, trainer.checkpoint_dir, trainer.resume_from_path)
        if path is None:
            archived = self.tracker.archive_previous()
            if archived:
                print(
                    f"starting fresh: the previous metrics of this run folder moved to {archived}", flush=True
                )
            return None
        state = load_trainer_state(path)
        load_policies(path, self.policies())
        self.load_state_dict(state)
        # The rollout serves the restored weights, exactly as after the step that was saved.
        self.sync_weights(self.global_step)
        self.tracker.rewind(self.logged_step())
        print(f"resumed from {path}: continuing after step {self.global_step}", flush=True)
        return path

    def logged_step(self) -> int:
        """The step the loggers filed the last finished step under (a resume drops what came later)."""
        return self.global_step

    def policies(self) -> list[WorkerGroups]:
        """The worker groups of every policy a checkpoint holds: the run's one policy."""
        return [self.groups]

    # ---- helpers --------------------------------------------------------------------------------
    @contextmanager
    def timed(self, name: str):
        start = time.perf_counter()
        yield
        self.timing[name] = self.timing.get(name, 0.0) + time.perf_counter() - start

    def step_metrics(self, batch: KVBatchMeta, step: int) -> dict[str, float]:
        tokens = sum(t.get("prompt_len", 0) + t.get("response_len", 0) for t in batch.tags)
        out = {f"timing_s/{k}": v for k, v in self.timing.items()}
        out.update({f"timing_per_token_ms/{k}": 1000 * v / max(tokens, 1) for k, v in self.timing.items()})
        out.update(
            {
                "perf/total_num_tokens": float(tokens),
                "perf/throughput": tokens / max(self.timing.get("step", 1e-9), 1e-9),
                "training/global_step": float(step),
                "training/epoch": float(self.train_batches.epoch),
            }
        )
        out.update(self.rollout_counts)
        out.update(tag_metrics(batch.tags, self.config.data.max_response_length))
        # the weights being updated are version step - 1 (the actor after that many updates)
        out.update(staleness_metrics(batch.tags, trainer_version=step - 1))
        # token tensor bytes the controller read from the store (should stay 0), as its client counts them
        out["kv/controller_bytes_read"] = float(self.kv.bytes_read)
        return out

    def _total_steps(self) -> int:
        steps_per_epoch = max(1, len(self.train_batches))
        total = steps_per_epoch * self.config.trainer.total_epochs
        if self.config.trainer.total_training_steps:
            total = (
                min(total, self.config.trainer.total_training_steps)
                if total
                else self.config.trainer.total_training_steps
            )
        return total
