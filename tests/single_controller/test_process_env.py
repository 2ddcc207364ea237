"""The environment every worker process of a job starts with."""

from verl_lite.single_controller.ray.process_env import WORKER_ENV_DEFAULTS, worker_env_vars


def test_defaults_apply_unless_the_user_exported_them(monkeypatch):
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    assert worker_env_vars() == WORKER_ENV_DEFAULTS
    assert WORKER_ENV_DEFAULTS["MALLOC_ARENA_MAX"] == "1"

    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")  # the user's choice reaches the workers through inheritance
    env = worker_env_vars(VERL_LITE_X="y")
    assert "MALLOC_ARENA_MAX" not in env
    assert env == {"TOKENIZERS_PARALLELISM": "false", "VERL_LITE_X": "y"}
