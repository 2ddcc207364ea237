"""Start Ray, place the data-parallel workers, run the ``SupervisedTrainer`` and always clean up."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

from verl_lite.trainer.sft.config import SupervisedConfig
from verl_lite.trainer.sft.sft_trainer import SupervisedData, SupervisedTrainer, total_steps


def run_supervised(
    config: SupervisedConfig,
    worker_cls: type,
    build_data: Callable[[Any], SupervisedData],
) -> list[dict[str, float]]:
    """Tokenize on the controller, start ``n_gpus_per_node`` workers, train; returns the step metrics."""
    import ray
    from transformers import AutoTokenizer

    from verl_lite.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
    from verl_lite.trainer.runtime import Runtime, local_num_cpus
    from verl_lite.trainer.tracking import Tracker

    tokenizer = AutoTokenizer.from_pretrained(config.model.tokenizer_path or config.model.path)
    data = build_data(tokenizer)
    # the cosine schedule needs the run length, known only once the data is tokenized
    optim = dataclasses.replace(config.optim, total_training_steps=total_steps(config, len(data.train)))
    config = dataclasses.replace(config, optim=optim)
    with Runtime() as runtime:
        runtime.start_ray(config.ray_kwargs.ray_init, local_num_cpus(config.trainer.n_gpus_per_node))
        use_gpu = ray.cluster_resources().get("GPU", 0) > 0
        pool = RayResourcePool([config.trainer.n_gpus_per_node], use_gpu=use_gpu, name_prefix="sft")
        runtime.callback(pool.release)
        group = RayWorkerGroup(pool, RayClassWithInitArgs(worker_cls, config=dataclasses.asdict(config)))
        runtime.callback(group.kill)
        group.init_model()
        run_dir = os.path.join(config.trainer.run_dir, config.trainer.experiment_name)
        tracker = Tracker(
            config.trainer.logger,
            run_dir,
            config.trainer.project_name,
            config.trainer.experiment_name,
            dataclasses.asdict(config),
        )
        runtime.callback(tracker.finish, [])
        return SupervisedTrainer(config, group, data, tracker).fit()
