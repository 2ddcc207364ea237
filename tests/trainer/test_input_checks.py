"""What the data rows and user files ask for is checked before Ray starts: ``main_ppo`` exits 2 naming key and value.

Each case goes through ``run_cli`` (what ``python -m verl_lite.main_ppo`` runs after Hydra) with the real
``run``: had a check missed, the run would reach Ray, which the ``ray_must_not_start`` fixture turns into a failure.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.trainer.helpers import FAST
from verl_lite.main_ppo import run
from verl_lite.trainer.load import compose_config, load_ppo_config
from verl_lite.utils.cli import run_cli

ARR = "actor_rollout_ref.rollout"
pytestmark = pytest.mark.usefixtures("ray_must_not_start")
ROW = {"prompt": "1 + 1 =", "reward_model": {"ground_truth": "2"}, "data_source": "synthetic_arith"}


def exits_2_before_ray(capsys, *overrides, config_name: str = "ppo_trainer") -> str:
    """``main_ppo``'s stderr for ``overrides``, asserting exit code 2 (the module's tests never reach Ray)."""
    with pytest.raises(SystemExit) as info:
        run_cli(compose_config(config_name, [*FAST, *overrides]), load_ppo_config, run)
    assert info.value.code == 2
    return capsys.readouterr().err


def rows_file(path, agent_names: list) -> str:
    path.write_text("".join(json.dumps({**ROW, "agent_name": name}) + "\n" for name in agent_names))
    return str(path)


def test_a_row_naming_an_unregistered_agent_loop_is_rejected_naming_the_value(tmp_path, capsys):
    data = rows_file(tmp_path / "rows.jsonl", ["single_turn", "tool_agnet", None, "tool_agnet"])
    err = exits_2_before_ray(capsys, f"data.train_files={data}", "data.val_files=null")
    assert (
        f"data.train_files: 2 row(s) of {data!r} (rows 1, 3) have agent_name='tool_agnet', which is not a "
        "registered agent loop; known: openai_agent, openenv, single_turn, tool_agent, single_turn (verl: single_turn_agent)"
    ) in err


def test_data_agent_name_replaces_the_rows_agent_names_and_is_checked_itself(tmp_path, capsys):
    data = rows_file(tmp_path / "rows.jsonl", ["tool_agnet", "tool_agnet"])
    # the rows' bad names no longer matter: every row runs single_turn
    config = load_ppo_config(
        compose_config(
            "ppo_trainer",
            [*FAST, f"data.train_files={data}", "data.val_files=null", "data.agent_name=single_turn"],
        )
    )
    assert config.data.agent_name == "single_turn"
    err = exits_2_before_ray(
        capsys, f"data.train_files={data}", "data.val_files=null", "data.agent_name=tool_agnet"
    )
    assert (
        "data.agent_name='tool_agnet' is not a registered agent loop; known: openai_agent, openenv, single_turn"
        in err
    )
    assert "row(s)" not in err


def test_verls_agent_names_mean_verl_lites_loops():
    data_ok = load_ppo_config(
        compose_config("ppo_trainer", [*FAST, f"{ARR}.agent.default_agent_loop=single_turn_agent"])
    )
    from verl_lite.workers.agent_loop import get_agent_loop

    assert (
        get_agent_loop(data_ok.actor_rollout_ref.rollout.agent.default_agent_loop).__name__
        == "SingleTurnAgentLoop"
    )
    assert get_agent_loop("tool_agent").__name__ == "ToolAgentLoop"


@pytest.mark.parametrize("key", ["data.max_response_length", "data.max_prompt_length"])
def test_a_zero_length_key_is_rejected(key, capsys):
    err = exits_2_before_ray(capsys, f"{key}=0")
    assert f"{key}=0 is not valid; use a positive number of tokens." in err


def test_a_zero_rollout_wait_bound_is_rejected(capsys):
    err = exits_2_before_ray(capsys, f"{ARR}.agent.generate_timeout_s=0")
    assert f"{ARR}.agent.generate_timeout_s=0 is not valid; use a positive number of seconds" in err


def test_every_prompt_above_max_prompt_length_is_rejected_naming_the_key(capsys):
    err = exits_2_before_ray(capsys, "data.max_prompt_length=4")
    assert "data.train_files: 0 usable rows in 'train.parquet': all " in err
    assert "prompts are longer than data.max_prompt_length=4 tokens (the shortest is " in err


def test_a_tool_module_that_does_not_import_is_rejected_naming_file_and_error(tmp_path, capsys, monkeypatch):
    (tmp_path / "broken_tool.py").write_text("def calculator(expression: str) -> str\n    return '1'\n")
    (tmp_path / "tools.yaml").write_text("tools:\n  - class_name: broken_tool.calculator\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    err = exits_2_before_ray(capsys, f"{ARR}.multi_turn.tool_config_path={tmp_path / 'tools.yaml'}")
    assert (
        f"{ARR}.multi_turn.tool_config_path: tool config {tmp_path / 'tools.yaml'}: tools[0]: class_name "
        f"'broken_tool.calculator' cannot be imported (SyntaxError in {tmp_path / 'broken_tool.py'} line 1: "
    ) in err


def test_a_folder_as_tool_config_path_is_rejected(tmp_path, capsys):
    err = exits_2_before_ray(capsys, f"{ARR}.multi_turn.tool_config_path={tmp_path}")
    assert f"tool config {tmp_path} is a folder; set multi_turn.tool_config_path to a yaml file." in err


def test_a_multi_agent_file_without_the_named_function_is_rejected(tmp_path, capsys):
    reward = tmp_path / "reward.py"
    reward.write_text("def joint_reward(a, b, *, batch_items=None):\n    return [0.0] * len(a)\n")
    formatter = tmp_path / "fmt.py"
    formatter.write_text("raise RuntimeError('needs a GPU')\n")
    err = exits_2_before_ray(
        capsys,
        "trainer.mode=magrpo",
        f"multi_agent.reward_function.path={reward}",
        f"multi_agent.formatters=[{{path: {formatter}, name: fmt}}]",
        f"{ARR}.mode=standalone",
        f"{ARR}.checkpoint_engine=ray",
    )
    assert (
        f"multi_agent.reward_function.name='reward_func': {str(reward)!r} has no function 'reward_func'; "
        "functions defined there: joint_reward."
    ) in err
    assert (
        f"multi_agent.formatters[0].path={str(formatter)!r} fails while it is imported "
        "(RuntimeError: needs a GPU)."
    ) in err


def test_main_ppo_exits_2_within_seconds_of_the_imports_for_a_bad_agent_name(tmp_path):
    data = rows_file(tmp_path / "rows.jsonl", ["tool_agnet"])
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "verl_lite.main_ppo", f"data.train_files={data}", "data.val_files=null"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    assert "agent_name='tool_agnet', which is not a registered agent loop" in proc.stderr
    assert "Started a local Ray instance" not in proc.stderr and "Traceback" not in proc.stderr
    print(f"\nexit 2 after {time.monotonic() - start:.1f} s")
