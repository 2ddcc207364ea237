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


def run(config) -> list[dict]:
    """Start (or join) Ray, run the ``TaskRunner``, and always shut down the Ray this call started.

    A Ray already running in this process is used and left running; so is the runner an earlier ``run``
    on it left with the same runtime env (``start_runner``), so runs in a row start one controller, and
    the worker processes that run kept (``verl_lite.single_controller.ray.parking``).
    SIGTERM and SIGINT stop the run (``verl_lite.trainer.stopping``) and raise ``StoppedBySignal``.
    """
    import dataclasses

    import ray

    from verl_lite.trainer.placement import get_placement
    from verl_lite.trainer.runtime import Runtime, local_num_cpus, ppo_env_vars
    from verl_lite.trainer.stopping import SignalNotes, wait_for_runner
    from verl_lite.trainer.task_runner import start_runner

    with SignalNotes() as notes, Runtime() as runtime:
        ray_was_running = ray.is_initialized()
        # a multi-agent run with a policy per agent places each policy's pools as the config does
        slots = get_placement(config).slots(config) * config.multi_agent.policies
        runtime.start_ray(config.ray_kwargs.ray_init, local_num_cpus(slots), ppo_env_vars(config))
        notes.install()  # again: ray.init sets a SIGTERM handler of its own
        # the runner's runtime env reaches every process it starts, also on a Ray this process had running
        runner = start_runner(runtime.runtime_env, reuse=ray_was_running)
        return wait_for_runner(runner, runner.run.remote(dataclasses.asdict(config)), notes)


@hydra.main(config_path="configs", config_name="ppo_trainer", version_base=None)
def main(cfg: DictConfig) -> None:
    from verl_lite.trainer.load import load_ppo_config
    from verl_lite.utils.cli import run_cli

    run_cli(cfg, load_ppo_config, run)


if __name__ == "__main__":
    import sys

    from verl_lite.trainer.verl_compat import translated_argv

    sys.argv = translated_argv(sys.argv)  # verl's spellings, before Hydra reads the command line
    main()
