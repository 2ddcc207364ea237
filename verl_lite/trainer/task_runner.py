"""``TaskRunner``: the remote controller that builds everything a run needs, trains, and cleans up."""

from __future__ import annotations

import hashlib
import json
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
    """Runs on the cluster: tokenizer, datasets, pools, workers, KV store, replay buffer, trainer.

    One run at a time; a runner may run several in a row (``start_runner``), each building and ending
    everything it uses.
    """

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._running = threading.Lock()
        self._trainer = None

    def request_stop(self) -> bool:
        """Have the trainer stop before its next step; returns whether it is writing a checkpoint now."""
        self._stop.set()
        return bool(getattr(self._trainer, "saving", False))

    def run(self, config_dict: dict) -> list[dict[str, Any]]:
        """Build the run from ``config_dict`` (a ``PPOConfig`` as a dict), train it; the logged metrics."""
        if not self._running.acquire(blocking=False):
            raise RuntimeError("this TaskRunner is running another run; start a runner per concurrent run.")
        try:
            self._stop.clear()
            return self._run(config_dict)
        finally:
            self._trainer = None
            self._running.release()

    def _run(self, config_dict: dict) -> list[dict[str, Any]]:
        from verl_lite.single_controller.ray.process_env import run_environment
        from verl_lite.trainer.runtime import ppo_env_vars
        from verl_lite.utils.config import from_config

        config = from_config(PPOConfig, config_dict)
        # this run's extensions and KV store name, here and in every process the run starts
        with run_environment(ppo_env_vars(config)):
            return self._train(config, config_dict)

    def _train(self, config: PPOConfig, config_dict: dict) -> list[dict[str, Any]]:
        from verl_lite.trainer.runtime import Runtime, extension_entries
        from verl_lite.utils.extensions import load_extensions

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


def start_runner(runtime_env: dict[str, Any], *, reuse: bool) -> Any:
    """A ``TaskRunner`` actor whose process (and every actor it starts) has ``runtime_env``.

    With ``reuse`` (for a Ray that outlives the run: a notebook's, a test session's), the runner an earlier
    run of this Ray job left with the same ``runtime_env`` is taken when it is still there, so runs in a row
    pay the runner's start-up (a Ray worker importing torch and transformers, ~5 CPU-s) once. It ends with
    the job. The extensions are left out of the comparison: each run loads its own and hands them to the
    processes it starts (``TaskRunner.run``). Runs that share a runtime env also share the KV store's name,
    so they cannot run at once anyway. Extensions are imported once per process, in the runner as in the
    driver: an extension edited between two runs takes effect in a new Python session.
    """
    from verl_lite.utils.extensions import ENV_VAR as EXTENSIONS_ENV

    env_vars = {k: v for k, v in (runtime_env.get("env_vars") or {}).items() if k != EXTENSIONS_ENV}
    runtime_env = {**runtime_env, "env_vars": env_vars}
    if not reuse:
        return TaskRunner.options(runtime_env=runtime_env).remote()
    digest = hashlib.sha256(json.dumps(runtime_env, sort_keys=True, default=str).encode()).hexdigest()[:16]
    # the job's id in the name: a runner is this driver's alone, also where drivers share a namespace
    name = f"verl_lite_task_runner_{ray.get_runtime_context().get_job_id()}_{digest}"
    try:
        ray.get_actor(name)
    except ValueError:  # none yet, or it is gone (a dead actor's name is free again)
        _OWNED_RUNNERS[name] = TaskRunner.options(name=name, runtime_env=runtime_env).remote()
    return _OWNED_RUNNERS[name]


# The creating handle of each reused runner: Ray ends an actor once its creator's handles are gone, named
# or not, whatever handles ray.get_actor gave out.
_OWNED_RUNNERS: dict[str, Any] = {}


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
