"""SIGTERM and SIGINT through ``python -m verl_lite.main_ppo``: a clean stop with 143 / 130, nothing left running.

Each run is a real ``main_ppo`` process in a session of its own; every process it started (Ray's, the
workers) is noted just before the signal and must be gone soon after the driver exits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.trainer.helpers import FAST

ROOT = Path(__file__).resolve().parents[2]
SLOW_SAVE = Path(__file__).resolve().parent / "slow_checkpoint.py"


def launch(tmp_path: Path, *overrides: str, env: dict | None = None) -> subprocess.Popen:
    """``main_ppo`` on the FAST settings in its own session; stdout and stderr go to files in ``tmp_path``."""
    command = [
        sys.executable,
        "-m",
        "verl_lite.main_ppo",
        *FAST,
        f"trainer.run_dir={tmp_path}",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        f"hydra.run.dir={tmp_path / 'hydra'}",
        *overrides,
    ]
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env={**environ, **(env or {})},
        stdout=open(tmp_path / "stdout.txt", "w"),
        stderr=open(tmp_path / "stderr.txt", "w"),
        start_new_session=True,
    )


def wait_for(condition, proc: subprocess.Popen, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"main_ppo exited {proc.returncode} before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.05)


def stop_and_time(proc: subprocess.Popen, send) -> tuple[float, list[psutil.Process]]:
    """Seconds from ``send()`` to the driver's exit, and the processes it had started that are still alive."""
    started = psutil.Process(proc.pid).children(recursive=True)
    start = time.monotonic()
    send()
    try:
        proc.wait(timeout=90)
    finally:
        if proc.poll() is None:  # leave nothing behind even when the test fails
            os.killpg(proc.pid, signal.SIGKILL)
    elapsed = time.monotonic() - start
    _, alive = psutil.wait_procs(started, timeout=10)
    return elapsed, alive


def test_sigterm_while_a_checkpoint_is_written_exits_143_with_every_checkpoint_complete(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    proc = launch(
        tmp_path,
        "trainer.total_training_steps=20",
        "trainer.save_freq=1",
        "trainer.mode=slow_save",
        f"trainer.extensions=[{SLOW_SAVE}]",
        env={"SLOW_SAVE_DIR": str(marks)},
    )
    wait_for(lambda: (marks / "saving_1").exists(), proc, 300, "checkpoint write of step 1")
    elapsed, alive = stop_and_time(proc, lambda: os.kill(proc.pid, signal.SIGTERM))
    stderr = (tmp_path / "stderr.txt").read_text()
    print(f"\nSIGTERM during a checkpoint write: exit {proc.returncode} after {elapsed:.1f} s")
    assert proc.returncode == 143, stderr[-3000:]
    assert "SIGABRT" not in stderr and "Traceback" not in stderr  # Ray's native dump is gone
    assert (
        "verl_lite: stopped by SIGTERM: the trainer stopped after step 1; every checkpoint written is complete."
        in stderr
    )
    assert not alive, [p.info for p in alive]
    checkpoints = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    # the write that was under way finished and was published; nothing half-written is left
    assert checkpoints == ["global_step_1", "latest_checkpointed_iteration.txt"]
    assert (tmp_path / "ckpt" / "global_step_1" / "COMPLETE").exists()
    assert (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").read_text().strip() == "1"


def test_ctrl_c_while_both_cores_are_busy_stops_within_15_s_with_130(tmp_path):
    proc = launch(tmp_path, "trainer.total_training_steps=200", "trainer.save_freq=-1")
    metrics = tmp_path / "grpo_tiny" / "metrics.jsonl"
    wait_for(lambda: metrics.exists() and metrics.read_text().strip(), proc, 300, "first step")
    # another job keeps both cores busy
    busy = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import multiprocessing as m, itertools as i\n"
            "def spin(_):\n    for _ in i.count(): pass\n"
            "m.Pool(2).map(spin, range(2))",
        ],
        start_new_session=True,
    )
    try:
        time.sleep(2.0)
        # Ctrl-C in a terminal: SIGINT to every process of the foreground group
        elapsed, alive = stop_and_time(proc, lambda: os.killpg(proc.pid, signal.SIGINT))
    finally:
        os.killpg(busy.pid, signal.SIGKILL)
    stderr = (tmp_path / "stderr.txt").read_text()
    print(f"\nCtrl-C with both cores busy: exit {proc.returncode} after {elapsed:.1f} s")
    assert proc.returncode == 130, stderr[-3000:]
    assert "verl_lite: stopped by SIGINT: " in stderr
    assert elapsed < 15
    assert not alive, [p.info for p in alive]
