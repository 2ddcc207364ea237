"""Running the entry points from tests: the packaged configs, Hydra overrides, a short real PPO run."""

import json

import pytest
import ray

from tests.conftest import start_local_ray
from verl_lite.main_ppo import run
from verl_lite.trainer.load import compose_config, load_ppo_config

# Small enough for a 2-core CPU: 4 prompts x 4 samples, short responses, no periodic validation.
FAST = [
    "data.train_batch_size=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.rollout.n=4",
    "data.max_response_length=24",
    "trainer.val_before_train=false",
    "trainer.test_freq=-1",
    "trainer.logger=[jsonl]",
    "ray_kwargs.ray_init.num_cpus=8",
]

# Two hf rollout servers on their own pool; weights reach them through Ray's object store.
STANDALONE = [
    "actor_rollout_ref.rollout.mode=standalone",
    "actor_rollout_ref.rollout.nnodes=1",
    "actor_rollout_ref.rollout.n_gpus_per_node=2",
    "actor_rollout_ref.rollout.agent.num_workers=2",
]


def worker_env(**env: object) -> list[str]:
    """Overrides that give every process of a run these environment variables (through the run's
    ``ray_kwargs.ray_init.runtime_env``: the suite's Ray started before a test could set them)."""
    return [f"+ray_kwargs.ray_init.runtime_env.env_vars.{name}='{value}'" for name, value in env.items()]


def joining(cluster) -> list[str]:
    """Overrides that make a run join ``cluster`` (a ``ray.cluster_utils.Cluster``) instead of starting Ray."""
    return [f"ray_kwargs.ray_init.address={cluster.address}", "~ray_kwargs.ray_init.num_cpus"]


def train(tmp_path, *overrides, config_name: str = "ppo_trainer", own_ray: bool = False):
    """``main_ppo`` on the FAST settings with its run folder under ``tmp_path``; returns the step metrics.

    ``config_name`` picks the packaged config (``--config-name``); ``overrides`` apply after FAST's. The
    run uses the suite's Ray (tests/conftest.py), or with ``own_ray`` starts and ends one of its own from
    ``ray_kwargs.ray_init`` as a user's run does.
    """
    if own_ray:
        if ray.is_initialized():
            ray.shutdown()
    else:
        start_local_ray()
    return run(
        load_ppo_config(compose_config(config_name, [*FAST, f"trainer.run_dir={tmp_path}", *overrides]))
    )


def train_cli(tmp_path, capsys, *overrides) -> tuple[int, str]:
    """``train``'s run through main_ppo's command-line shell (``run_cli``), expected to fail: its exit code
    and the last ``verl_lite:`` line it printed on stderr (``capsys``: pytest's fixture)."""
    from verl_lite.utils.cli import run_cli

    start_local_ray()
    cfg = compose_config("ppo_trainer", [*FAST, f"trainer.run_dir={tmp_path}", *overrides])
    with pytest.raises(SystemExit) as info:
        run_cli(cfg, load_ppo_config, run)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("verl_lite: ")]
    return info.value.code, lines[-1]


def crashing_mode(name: str, base_module: str, base_class: str, after_step: int) -> str:
    """Source of an extension that registers trainer mode ``name``: ``base_class`` (from ``base_module``)
    raising right after step ``after_step`` was logged and checkpointed, as a killed run would stop."""
    return f"""
from verl_lite.trainer.ppo.trainer_base import register_trainer
from {base_module} import {base_class}


@register_trainer("{name}")
class CrashAfter({base_class}):
    def on_step_end(self, step, metrics):
        super().on_step_end(step, metrics)
        if step == {after_step}:
            raise RuntimeError("simulated crash after step {after_step}")
"""


def dumped_generations(directory) -> dict[int, list[dict]]:
    """The generation dump's lines (``trainer.rollout_data_dir``) per step file."""
    return {
        int(path.stem): [json.loads(line) for line in path.read_text().splitlines()]
        for path in sorted(directory.glob("*.jsonl"))
    }
