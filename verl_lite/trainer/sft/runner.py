"""Start Ray, place the data-parallel workers, run the ``SupervisedTrainer`` and always clean up."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

from verl_lite.trainer.sft.config import SupervisedConfig
from verl_lite.trainer.sft.sft_trainer import SupervisedData, SupervisedTrainer, total_steps


def init_ray(config: SupervisedConfig) -> None:
    """Start a local Ray sized for the workers, or join the cluster at ``ray_kwargs.ray_init.address``."""
    import ray

    from verl_lite.single_controller.ray.process_env import worker_env_vars

    init_kwargs = {k: v for k, v in config.ray_kwargs.ray_init.items() if v is not None}
    if "address" not in init_kwargs:
        # A null address always starts a fresh local instance, even beside a running `ray start` cluster.
        init_kwargs["address"] = "local"
        init_kwargs.setdefault("num_cpus", max(4, config.trainer.n_gpus_per_node + 2))
        init_kwargs.setdefault("object_store_memory", 300 * 1024**2)
        init_kwargs.setdefault("include_dashboard", False)
    runtime_env = dict(init_kwargs.pop("runtime_env", None) or {})
    runtime_env["env_vars"] = {**worker_env_vars(), **runtime_env.get("env_vars", {})}
    ray.init(runtime_env=runtime_env, **init_kwargs)


def run_supervised(
    config: SupervisedConfig,
    worker_cls: type,
    build_data: Callable[[Any], SupervisedData],
) -> list[dict[str, float]]:
    """Tokenize on the controller, start ``n_gpus_per_node`` workers, train; returns the step metrics."""
    import ray
    from transformers import AutoTokenizer

    from verl_lite.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
    from verl_lite.trainer.tracking import Tracker

    tokenizer = AutoTokenizer.from_pretrained(config.model.tokenizer_path or config.model.path)
    data = build_data(tokenizer)
    # the cosine schedule needs the run length, known only once the data is tokenized
    optim = dataclasses.replace(config.optim, total_training_steps=total_steps(config, len(data.train)))
    config = dataclasses.replace(config, optim=optim)
    started = not ray.is_initialized()
    if started:
        init_ray(config)
    pool = group = tracker = None
    try:
        use_gpu = ray.cluster_resources().get("GPU", 0) > 0
        pool = RayResourcePool([config.trainer.n_gpus_per_node], use_gpu=use_gpu, name_prefix="sft")
        group = RayWorkerGroup(pool, RayClassWithInitArgs(worker_cls, config=dataclasses.asdict(config)))
        group.init_model()
        run_dir = os.path.join(config.trainer.run_dir, config.trainer.experiment_name)
        tracker = Tracker(
            config.trainer.logger,
            run_dir,
            config.trainer.project_name,
            config.trainer.experiment_name,
            dataclasses.asdict(config),
        )
        return SupervisedTrainer(config, group, data, tracker).fit()
    finally:
        if tracker is not None:
            tracker.finish([])
        if group is not None:
            group.kill()
        if pool is not None:
            pool.release()
        if started:
            ray.shutdown()
