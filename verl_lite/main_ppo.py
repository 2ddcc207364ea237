"""Entry point: ``python -m verl_lite.main_ppo [hydra overrides]`` trains with PPO/GRPO on Ray.

The config is built and validated before Ray starts; then a local Ray is started (or the cluster
at ``ray_kwargs.ray_init.address`` is joined), the ``TaskRunner`` controller runs the training,
and the process exits non-zero with the error message when anything fails.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from verl_lite.utils.config import register_package_resolver

register_package_resolver()


def load_config(cfg: DictConfig):
    """Typed, defaults-resolved and validated config from Hydra's ``cfg`` (``load_ppo_config``)."""
    from verl_lite.trainer.load import load_ppo_config

    return load_ppo_config(cfg)


def run(config) -> list[dict]:
    """Start (or join) Ray, run the ``TaskRunner`` and always shut Ray down.

    SIGTERM and SIGINT stop the run (``verl_lite.trainer.stopping``) and raise ``StoppedBySignal``.
    """
    import dataclasses

    import ray

    from verl_lite.kv.config import NAME_PREFIX_ENV
    from verl_lite.single_controller.ray.process_env import worker_env_vars
    from verl_lite.trainer.placement import get_placement
    from verl_lite.trainer.stopping import SignalNotes, wait_for_runner
    from verl_lite.trainer.task_runner import TaskRunner
    from verl_lite.utils.extensions import extensions_env

    init_kwargs = {k: v for k, v in config.ray_kwargs.ray_init.items() if v is not None}
    if "address" not in init_kwargs:
        # "local" always starts a fresh instance, even when a `ray start` cluster runs on this machine.
        init_kwargs["address"] = "local"
        init_kwargs.setdefault("num_cpus", max(4, get_placement(config).slots(config) + 2))
        init_kwargs.setdefault("object_store_memory", 512 * 1024**2)
        init_kwargs.setdefault("include_dashboard", False)
    env_vars = worker_env_vars(
        # the workers' get_kv_client() finds this run's store
        **{NAME_PREFIX_ENV: config.kv.name_prefix},
        **extensions_env(config.trainer.extensions),
    )
    runtime_env = dict(init_kwargs.pop("runtime_env", None) or {})
    runtime_env["env_vars"] = {**env_vars, **runtime_env.get("env_vars", {})}
    with SignalNotes() as notes:
        ray.init(runtime_env=runtime_env, **init_kwargs)
        try:
            notes.install()  # again: ray.init sets a SIGTERM handler of its own
            runner = TaskRunner.remote()
            return wait_for_runner(runner, runner.run.remote(dataclasses.asdict(config)), notes)
        finally:
            ray.shutdown()


@hydra.main(config_path="configs", config_name="ppo_trainer", version_base=None)
def main(cfg: DictConfig) -> None:
    from verl_lite.utils.cli import run_cli

    run_cli(cfg, load_config, run)


if __name__ == "__main__":
    main()
