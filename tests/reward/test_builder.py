"""The reward config group and the checks run before training starts."""

import pytest

from verl_lite.reward import NaiveRewardManager, RewardConfig, build_reward_manager, validate_reward_config
from verl_lite.reward.managers import RewardItem


def test_defaults_mirror_the_yaml_group():
    cfg = RewardConfig()
    assert cfg.reward_manager == "naive" and cfg.custom_reward_function.path is None
    assert cfg.custom_reward_function.name == "compute_score"
    assert (cfg.overlong_buffer.enable, cfg.overlong_buffer.len, cfg.overlong_buffer.penalty_factor) == (
        False,
        0,
        1.0,
    )
    assert (cfg.processors.scale, cfg.processors.clip_min, cfg.processors.clip_max) == (1.0, None, None)
    assert (cfg.reward_model.enable, cfg.reward_model.model.path, cfg.reward_kwargs) == (False, None, {})
    assert (cfg.reward_model.combine, cfg.reward_model.micro_batch_size_per_gpu) == ("replace", 64)


def test_from_any_accepts_omegaconf_and_rejects_unknown_keys():
    from omegaconf import OmegaConf

    cfg = RewardConfig.from_any(
        OmegaConf.create({"processors": {"clip_max": 1.0}, "reward_kwargs": {"method": "flexible"}})
    )
    assert cfg.processors.clip_max == 1.0 and cfg.reward_kwargs == {"method": "flexible"}
    with pytest.raises(ValueError, match=r"reward\.overlong_buffer\.size"):
        RewardConfig.from_any({"overlong_buffer": {"size": 3}})


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"overlong_buffer": {"enable": True}}, "overlong_buffer.len"),
        ({"overlong_buffer": {"penalty_factor": -1.0}}, "penalty_factor"),
        ({"processors": {"clip_min": 1.0, "clip_max": 0.0}}, "clip_min"),
        ({"reward_model": {"enable": True}}, "reward_model.model.path"),
        ({"reward_model": {"combine": "mean"}}, "reward_model.combine"),
        ({"reward_model": {"micro_batch_size_per_gpu": 0}}, "micro_batch_size_per_gpu"),
        ({"custom_reward_function": {"name": "not a name"}}, "custom_reward_function.name"),
    ],
)
def test_invalid_values_name_their_key(values, key):
    with pytest.raises(ValueError, match=key):
        RewardConfig.from_any(values)


def test_build_without_custom_function_uses_builtin_scorers():
    manager = build_reward_manager(None)
    assert isinstance(manager, NaiveRewardManager)


def test_validate_accepts_known_sources_and_kwargs():
    config = {"reward_kwargs": {"method": "flexible"}}
    # validation raises on a problem and otherwise returns nothing and leaves the config as it was
    assert validate_reward_config(config, {"openai/gsm8k", "math"}) is None
    assert config == {"reward_kwargs": {"method": "flexible"}}
    # what it accepted is what runs: the built manager hands method=flexible to the gsm8k scorer, which then
    # takes the last number of a response without "#### " (strict extraction would find none and score 0)
    item = RewardItem("openai/gsm8k", "q", "so the answer is 42", "42")
    assert build_reward_manager(config)([item])[0].score == 1.0
    assert build_reward_manager(RewardConfig())([item])[0].score == 0.0


def test_validate_reports_data_source_without_scorer():
    with pytest.raises(ValueError, match=r"\['my/set'\] have no reward scorer.*known data sources"):
        validate_reward_config(RewardConfig(), {"my/set", "openai/gsm8k"})


def test_validate_reports_unknown_manager_with_known_names():
    with pytest.raises(ValueError, match=r"'navie'.*batch, dapo, naive"):
        validate_reward_config({"reward_manager": "navie"}, {"openai/gsm8k"})
    with pytest.raises(ValueError, match="navie"):
        build_reward_manager({"reward_manager": "navie"})


def test_validate_reports_kwargs_no_scorer_takes():
    with pytest.raises(ValueError, match="'methd'"):
        validate_reward_config({"reward_kwargs": {"methd": "flexible"}}, {"openai/gsm8k"})


def test_validate_batch_manager_needs_a_batch_function(tmp_path):
    with pytest.raises(ValueError, match="custom_reward_function.path"):
        validate_reward_config({"reward_manager": "batch"}, {"openai/gsm8k"})
    path = tmp_path / "r.py"
    path.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info):\n    return 0.0\n"
    )
    with pytest.raises(ValueError, match="per-sample form.*use naive or dapo"):
        validate_reward_config(
            {"reward_manager": "batch", "custom_reward_function": {"path": str(path)}}, {"x"}
        )
    # with a custom function any data source is fine
    validate_reward_config({"custom_reward_function": {"path": str(path)}}, {"x"})
