"""``Runtime.start_ray``: the local Ray every entry point starts, and a running one left alone; one
``TaskRunner`` shared by the runs made in a row on one Ray."""

import os
import threading
import time

import pytest
import ray

from verl_lite.trainer.runtime import Runtime
from verl_lite.trainer.task_runner import start_runner


@ray.remote(num_cpus=0)
def worker_env(*names):
    return {name: os.environ.get(name) for name in names}


def test_start_ray_gives_workers_the_run_env_with_user_env_vars_winning_and_shuts_down_on_close():
    if ray.is_initialized():
        ray.shutdown()
    ray_init = {"address": None, "num_cpus": None, "runtime_env": {"env_vars": {"VERL_LITE_B": "user"}}}
    with Runtime() as runtime:
        runtime.start_ray(ray_init, num_cpus=3, env_vars={"VERL_LITE_A": "run", "VERL_LITE_B": "run"})
        # null keys are left to the defaults: num_cpus is the caller's 3
        assert ray.cluster_resources()["CPU"] == 3
        env = ray.get(worker_env.remote("VERL_LITE_A", "VERL_LITE_B", "TOKENIZERS_PARALLELISM"))
    assert env == {"VERL_LITE_A": "run", "VERL_LITE_B": "user", "TOKENIZERS_PARALLELISM": "false"}
    assert not ray.is_initialized()


def test_start_ray_uses_a_running_ray_leaves_it_running_and_hands_the_run_env_to_its_actors(ray_local):
    cpus = ray.cluster_resources()["CPU"]
    ray_init = {"address": None, "num_cpus": None, "runtime_env": {"env_vars": {"VERL_LITE_B": "user"}}}
    with Runtime() as runtime:
        runtime.start_ray(ray_init, num_cpus=int(cpus) + 5, env_vars={"VERL_LITE_A": "run"})
        assert ray.cluster_resources()["CPU"] == cpus
        # the running Ray's job has none of the run's env; what the run starts with runtime_env has it
        assert ray.get(worker_env.remote("VERL_LITE_A"))["VERL_LITE_A"] is None
        with_env = worker_env.options(runtime_env=runtime.runtime_env)
        env = ray.get(with_env.remote("VERL_LITE_A", "VERL_LITE_B"))
    assert env == {"VERL_LITE_A": "run", "VERL_LITE_B": "user"}
    assert ray.is_initialized()


def runner_pid(runner) -> int:
    return ray.get(runner.__ray_call__.remote(lambda runner: os.getpid()))


def test_runs_on_a_running_ray_share_a_runner_per_runtime_env_and_a_dead_one_is_replaced(ray_local):
    env = {"env_vars": {"VERL_LITE_KV_NAME_PREFIX": "runner_test"}}
    first = start_runner(env, reuse=True)
    assert runner_pid(start_runner(dict(env), reuse=True)) == runner_pid(first)
    # another runtime env (the workers inherit the runner's), or a Ray of the run's own: a runner of its own
    other_env = {"env_vars": {"VERL_LITE_KV_NAME_PREFIX": "runner_test_2"}}
    assert runner_pid(start_runner(other_env, reuse=True)) != runner_pid(first)
    assert runner_pid(start_runner(env, reuse=False)) != runner_pid(first)
    # one run at a time: a second, while the first holds the runner, is refused
    ray.get(first.__ray_call__.remote(lambda runner: runner._running.acquire()))
    with pytest.raises(ray.exceptions.RayTaskError, match="running another run"):
        ray.get(first.run.remote({}))
    pid = runner_pid(first)
    ray.kill(first, no_restart=True)
    assert runner_pid(start_runner(env, reuse=True)) != pid


def test_runs_that_differ_in_extensions_share_a_runner_and_each_runs_workers_load_their_own(tmp_path):
    from tests.trainer.helpers import train

    marks = {}
    for name in ("a", "b"):
        marks[name] = tmp_path / f"imported_{name}.txt"
        (tmp_path / f"ext_{name}.py").write_text(
            f"import os\nwith open({str(marks[name])!r}, 'a') as f:\n    f.write(f'{{os.getpid()}}\\n')\n"
        )
    for name in ("a", "b"):
        history = train(
            tmp_path / name,
            "trainer.total_training_steps=1",
            f"trainer.extensions=[{tmp_path}/ext_{name}.py]",
        )
        assert [h["step"] for h in history] == [1]
    # every process that imported an extension, but this one (the driver validates the config with it)
    pids = {name: set(map(int, path.read_text().split())) - {os.getpid()} for name, path in marks.items()}
    # one runner imported both; each run's worker processes imported only their run's extension
    [runner] = pids["a"] & pids["b"]
    assert pids["a"] - {runner} and pids["b"] - {runner}


def test_a_store_kept_on_a_ray_that_was_shut_down_is_let_go_when_its_time_is_up(monkeypatch):
    from tests.conftest import start_local_ray
    from verl_lite.kv import init_kv_store, shutdown_kv_store

    thread_errors = []
    monkeypatch.setattr(threading, "excepthook", thread_errors.append)
    start_local_ray()
    init_kv_store(name_prefix="old_ray", num_storage_units=1)
    shutdown_kv_store("old_ray", keep_s=12.0)
    fired = time.monotonic() + 13.0
    ray.shutdown()
    start_local_ray()
    assert time.monotonic() < fired - 2.0, "Ray took too long to restart for this check"
    time.sleep(fired - time.monotonic())  # the timer fired on the new Ray, where the store does not exist
    assert thread_errors == []


def test_runs_in_a_row_build_their_workers_in_the_processes_the_last_run_kept(tmp_path):
    """A run that ended well keeps its policy processes for the next run on the same Ray (parking): the next
    run of the same shape builds its workers in them (if they were started for its roles or more) and trains
    as it would in new ones; a run that failed leaves none."""
    from tests.trainer.helpers import train

    pids, fail = tmp_path / "scored_in.txt", tmp_path / "fail"
    scorer = tmp_path / "pid_score.py"  # scores in the policy's process (hybrid: the agent loops run there)
    scorer.write_text(
        "import os\nfrom verl_lite.reward import default_compute_score\n\n\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        f"    if os.path.exists({str(fail)!r}):\n"
        "        raise RuntimeError('this run fails')\n"
        f"    with open({str(pids)!r}, 'a') as f:\n"
        "        f.write(f'{os.getpid()}\\n')\n"
        "    return default_compute_score(data_source, solution_str, ground_truth, extra_info)\n"
    )

    def run(name: str, *extra: str) -> tuple[list[dict], set[str]]:
        pids.write_text("")
        overrides = ["trainer.total_training_steps=2", f"reward.custom_reward_function.path={scorer}", *extra]
        history = train(tmp_path / name, *overrides)
        return history, set(pids.read_text().split())

    first, [first_pid] = run("first")
    second, [second_pid] = run("second")
    assert second_pid == first_pid

    # seeded the same, a worker built in a kept process trains exactly as one in a new process
    def measured(step: dict) -> dict:  # every metric but durations and what is divided by one
        return {
            k: v
            for k, v in step.items()
            if not k.startswith(("timing", "perf/throughput", "replay_buffer/wait_s"))
        }

    assert [measured(step) for step in first] == [measured(step) for step in second]
    # a process hosts the roles it was started for or fewer: a critic needs a new one, which then
    # serves a run without a critic
    _, [with_critic] = run("with_critic", "algorithm.adv_estimator=gae")
    _, [without_critic] = run("without_critic")
    assert with_critic != first_pid and without_critic == with_critic
    fail.touch()
    with pytest.raises(Exception, match="this run fails"):
        run("failing")
    fail.unlink()
    _, [after_failure] = run("after_failure")
    assert after_failure != first_pid
