"""``TaskRunner``: the remote controller that builds everything a run needs, trains, and cleans up."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import ray

from verl_lite.trainer.config import PPOConfig


def build_dataset(config: PPOConfig, tokenizer, split: str):
    """The training or validation prompts as an ``RLHFDataset``."""
    from verl_lite.data.rl_dataset import RLHFDataset

    data = config.data
    dataset = RLHFDataset(
        data.train_files if split == "train" else data.val_files,
        tokenizer,
        prompt_key=data.prompt_key,
        max_prompt_length=data.max_prompt_length,
        filter_overlong_prompts=data.filter_overlong_prompts,
        truncation=data.truncation,
        default_data_source=data.default_data_source,
        agent_name=data.agent_name,
        split=split,
    )
    if not len(dataset):  # all rows skipped once tokenized (overlong); the other reasons fail before Ray
        skipped = ", ".join(f"{entry['count']} {reason}" for reason, entry in dataset.skipped.items())
        raise ValueError(
            f"data.{split}_files: 0 usable rows ({skipped} skipped; prompts above "
            f"data.max_prompt_length={data.max_prompt_length} tokens count as overlong_prompt)."
        )
    return dataset


@ray.remote(num_cpus=0, max_concurrency=2)  # the second thread answers request_stop while run runs
class TaskRunner:
    """Runs on the cluster: tokenizer, datasets, pools, workers, KV store, replay buffer, trainer."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._trainer = None

    def request_stop(self) -> bool:
        """Have the trainer stop before its next step; returns whether it is writing a checkpoint now."""
        self._stop.set()
        return bool(getattr(self._trainer, "saving", False))

    def run(self, config_dict: dict) -> list[dict[str, Any]]:
        """Build the run from ``config_dict`` (a ``PPOConfig`` as a dict), train it; the logged metrics."""
        from verl_lite.trainer.runtime import Runtime, extension_entries
        from verl_lite.utils.config import from_config
        from verl_lite.utils.extensions import load_extensions

        config = from_config(PPOConfig, config_dict)
        load_extensions(extension_entries(config))

        with Runtime() as runtime, ThreadPoolExecutor(1, thread_name_prefix="start-workers") as starter:
            # The store is named at once (its actors start in the background); the worker processes start
            # and load their models while this process imports the trainer and tokenizes the prompts: the
            # start-up of both sides overlaps on different cores. The store is requested here, before the
            # imports: they hold the interpreter lock, which would delay a request made in the thread.
            kv = runtime.start_kv_store(config.kv)
            started = starter.submit(runtime.start_policy, config)
            batches, val = _load_prompts(config)
            import verl_lite.trainer.modes  # noqa: F401  register the built-in modes
            from verl_lite.trainer.ppo.replay_buffer import ReplayBuffer, ReplayBufferConfig
            from verl_lite.trainer.ppo.trainer_base import get_trainer_cls
            from verl_lite.trainer.tracking import Tracker

            groups = started.result()
            buffer = ReplayBuffer(ReplayBufferConfig.from_ppo_config(config), client=kv)
            tracker = Tracker(
                config.trainer.logger,
                config.trainer.run_path,
                config.trainer.project_name,
                config.trainer.experiment_name,
                config_dict,
            )
            trainer = get_trainer_cls(config.trainer.mode)(config, groups, kv, buffer, batches, val, tracker)
            trainer.stop_requested = self._stop.is_set
            self._trainer = trainer
            return trainer.fit()


def _load_prompts(config: PPOConfig):
    """The training prompts as ``PromptBatches`` and the validation ``RLHFDataset`` (or None), tokenized."""
    from transformers import AutoTokenizer

    from verl_lite.data.rl_dataset import PromptBatches

    tokenizer = AutoTokenizer.from_pretrained(config.model.tokenizer_path or config.model.path)
    train = build_dataset(config, tokenizer, "train")
    val = build_dataset(config, tokenizer, "val") if config.data.val_files else None
    batches = PromptBatches(
        train, config.data.train_batch_size, shuffle=config.data.shuffle, seed=config.data.seed
    )
    return batches, val
