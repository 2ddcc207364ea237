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
    """Pick the checkpoint to resume, tokenize on the controller, start ``nnodes x n_gpus_per_node`` workers
    (one placement group per node), train; returns the metrics of the steps this run took."""
    import ray
    from transformers import AutoTokenizer

    from verl_lite.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
    from verl_lite.trainer.checkpoint import resolve_resume_path
    from verl_lite.trainer.runtime import Runtime, local_num_cpus
    from verl_lite.trainer.tracking import Tracker

    trainer = config.trainer
    # before any expensive work: a damaged or missing checkpoint stops the run in one sentence
    resume_path = resolve_resume_path(
        trainer.resume_mode, trainer.default_local_dir, trainer.resume_from_path
    )
    tokenizer = AutoTokenizer.from_pretrained(config.model.tokenizer_path or config.model.path)
    data = build_data(tokenizer)
    # the cosine schedule needs the run length, known only once the data is tokenized
    optim = dataclasses.replace(config.optim, total_training_steps=total_steps(config, len(data.train)))
    config = dataclasses.replace(config, optim=optim)
    with Runtime() as runtime:
        runtime.start_ray(config.ray_kwargs.ray_init, local_num_cpus(config.dp_size))
        use_gpu = ray.cluster_resources().get("GPU", 0) > 0
        pool = RayResourcePool([trainer.n_gpus_per_node] * trainer.nnodes, use_gpu=use_gpu, name_prefix="sft")
        runtime.callback(pool.release)
        group = RayWorkerGroup(pool, RayClassWithInitArgs(worker_cls, config=dataclasses.asdict(config)))
        runtime.callback(group.kill)
        group.init_model()
        run_dir = os.path.join(trainer.run_dir, trainer.experiment_name)
        tracker = Tracker(
            trainer.logger,
            run_dir,
            trainer.project_name,
            trainer.experiment_name,
            dataclasses.asdict(config),
        )
        runtime.callback(tracker.finish, [])
        return SupervisedTrainer(config, group, data, tracker).fit(resume_path)
