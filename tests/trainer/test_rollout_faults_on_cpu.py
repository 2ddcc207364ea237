"""A standalone rollout server SIGKILLed mid-step, through main_ppo: the step completes, nothing lost or doubled.

The servers are the real ones with a kill added (tests/trainer/dying_rollout.py): the first server process
to receive its third request of the chosen step kills itself with SIGKILL. What is checked is what a run
must guarantee then: the requests that were in flight on it are served by a live server (another one, or
its replacement once Ray restarted it, with the current weights), every prompt of the step is trained on
exactly once with all its samples, and the counters say what happened. With no server left, the run ends
saying so.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.trainer.helpers import FAST, train, train_cli, worker_env

ARR = "actor_rollout_ref.rollout"
DYING = Path(__file__).resolve().parent / "dying_rollout.py"
# checkpoint_engine=ray is what standalone implies; set explicitly here, it must be accepted and used
STANDALONE = [f"{ARR}.mode=standalone", f"{ARR}.checkpoint_engine=ray", f"trainer.extensions=[{DYING}]"]
PROMPTS, SAMPLES = 4, 4  # FAST's train_batch_size and rollout.n
assert f"data.train_batch_size={PROMPTS}" in FAST and f"{ARR}.n={SAMPLES}" in FAST


@pytest.fixture
def kill_at(tmp_path):
    """``kill_at(step)``: the folder where the dying server records its kill and every served request, and
    the overrides that arm it."""

    def arm(step: int) -> tuple[Path, list[str]]:
        folder = tmp_path / "dying"
        folder.mkdir()
        return folder, worker_env(DYING_ROLLOUT_DIR=folder, DYING_ROLLOUT_STEP=step)

    return arm


def check_fault_handled(
    folder: Path, dumps: Path, history: list[dict], step: int, probs_diff: float = 1e-4
) -> None:
    """The kill happened, its requests were served afterwards, and ``step`` trained every prompt once."""
    killed = json.loads((folder / "killed.json").read_text())
    served = [line.split() for line in (folder / "served.txt").read_text().splitlines()]
    after = {rid: float(when) - killed["time"] for when, rid in served if float(when) > killed["time"]}
    assert killed["in_flight"] and set(killed["in_flight"]) <= set(after)
    # how long the run took to react, for reading with -s; not a check
    waits = [after[rid] for rid in killed["in_flight"]]
    print(f"\nkilled requests served again {min(waits):.2f}-{max(waits):.2f} s after the SIGKILL")
    metrics = {h["step"]: h for h in history}
    assert metrics[step]["rollout/requests_retried"] >= len(killed["in_flight"])
    rows = [json.loads(line) for line in (dumps / f"{step}.jsonl").read_text().splitlines()]
    keys = [row["key"] for row in rows]
    assert len(keys) == len(set(keys)) == PROMPTS * SAMPLES
    assert sorted(Counter(row["uid"] for row in rows).values()) == [SAMPLES] * PROMPTS
    # the rollout sampled with the actor's weights (step 2: the ones synced after step 1) on every server
    for h in history:
        assert h["training/rollout_probs_diff_mean"] < probs_diff


def test_hf_server_killed_mid_step_is_dropped_and_the_step_completes_on_the_other(tmp_path, kill_at):
    folder, dying = kill_at(1)
    history = train(
        tmp_path,
        *dying,
        "trainer.total_training_steps=2",
        *STANDALONE,
        f"{ARR}.name=hf_dying",
        f"{ARR}.n_gpus_per_node=2",
        f"{ARR}.max_restarts=0",
        f"trainer.rollout_data_dir={tmp_path / 'dumps'}",
    )
    assert [h["step"] for h in history] == [1, 2]
    check_fault_handled(folder, tmp_path / "dumps", history, step=1)
    assert sum(h["rollout/server_restarts"] for h in history) == 0


def test_hf_server_killed_mid_step_is_restarted_with_the_current_weights(tmp_path, kill_at):
    # one server, killed in step 2: its requests wait for the replacement, which serves the step-1 weights
    folder, dying = kill_at(2)
    history = train(
        tmp_path,
        *dying,
        "trainer.total_training_steps=2",
        *STANDALONE,
        f"{ARR}.name=hf_dying",
        f"{ARR}.max_restarts=1",
        f"trainer.rollout_data_dir={tmp_path / 'dumps'}",
    )
    assert [h["step"] for h in history] == [1, 2]
    check_fault_handled(folder, tmp_path / "dumps", history, step=2)
    assert sum(h["rollout/server_restarts"] for h in history) == 1


@pytest.mark.vllm
def test_vllm_server_killed_mid_step_is_restarted_with_the_current_weights(tmp_path, kill_at):
    # Also the standalone vLLM end-to-end test (one engine start fewer in the suite): the step-1 weights
    # reach the server through the ray engine, and its replacement through the recovery board.
    folder, dying = kill_at(2)
    history = train(
        tmp_path,
        *dying,
        "trainer.total_training_steps=2",
        *STANDALONE,
        f"{ARR}.name=vllm_dying",
        f"{ARR}.max_restarts=1",
        f"{ARR}.max_model_len=96",
        f"{ARR}.free_cache_engine=false",
        f"trainer.rollout_data_dir={tmp_path / 'dumps'}",
    )
    assert [h["step"] for h in history] == [1, 2]
    check_fault_handled(folder, tmp_path / "dumps", history, step=2, probs_diff=1e-3)
    assert sum(h["rollout/server_restarts"] for h in history) == 1
    assert history[0]["update_weights/bytes"] > 0 and history[-1]["kv/controller_bytes_read"] == 0


def test_the_run_ends_naming_the_cause_when_no_rollout_server_is_left(tmp_path, kill_at, capsys):
    folder, dying = kill_at(1)
    code, line = train_cli(
        tmp_path,
        capsys,
        *dying,
        "trainer.total_training_steps=1",
        *STANDALONE,
        f"{ARR}.name=hf_dying",
        f"{ARR}.max_restarts=0",
    )
    # an agent-loop worker raised it: the user reads its sentence alone, and exit code 3
    assert code == 3
    assert re.fullmatch(
        r"verl_lite: the run stopped: every rollout server is gone: server 0 died .*rollout.max_restarts=0.*",
        line,
    ), line
    killed = json.loads((folder / "killed.json").read_text())
    print(f"\nthe run ended {time.time() - killed['time']:.2f} s after the SIGKILL (Ray shut down included)")


def test_a_rollout_past_generate_timeout_s_ends_the_run_naming_what_it_waited_for(tmp_path, capsys):
    # registers hf_slow by importing tests.trainer.slow_rollout, the module other tests of this session
    # import too (loading the file by path would register a second class under the same name)
    slow = tmp_path / "slow.py"
    slow.write_text("import tests.trainer.slow_rollout  # noqa: F401\n")
    start = time.monotonic()
    code, line = train_cli(
        tmp_path,
        capsys,
        "trainer.total_training_steps=1",
        *worker_env(SLOW_ROLLOUT_TOKEN_S=2),  # 24 tokens: ~50 s per generation
        f"trainer.extensions=[{slow}]",
        f"{ARR}.name=hf_slow",
        f"{ARR}.agent.generate_timeout_s=5",
    )
    assert code == 3
    assert re.fullmatch(
        r"verl_lite: the run stopped: the rollout did not finish within actor_rollout_ref.rollout.agent."
        r"generate_timeout_s=5 s: 1 of 1 agent-loop workers were still generating their share of the "
        r"training batch .*",
        line,
    ), line
    print(f"\nthe run ended {time.monotonic() - start:.1f} s after it started")
