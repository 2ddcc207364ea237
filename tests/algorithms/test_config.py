"""Reading hyperparameters from any config shape (verl_lite/algorithms/config.py)."""

import dataclasses
from dataclasses import dataclass
from types import SimpleNamespace

from omegaconf import OmegaConf

from verl_lite.algorithms import PolicyLossConfig, config_get
from verl_lite.algorithms.config import policy_loss_problems
from verl_lite.workers.config import ActorConfig


@dataclass(frozen=True)
class _AlgoConfig:
    epsilon: float = 1e-3
    norm_adv_by_std_in_grpo: bool | None = None


def test_config_get_reads_every_config_shape():
    # The same key from a dict, a DictConfig, a dataclass and a namespace; None -> default.
    shapes = [
        {"epsilon": 1e-3},
        OmegaConf.create({"epsilon": 1e-3}),
        _AlgoConfig(),
        SimpleNamespace(epsilon=1e-3),
    ]
    for config in shapes:
        assert config_get(config, "epsilon", 1e-6) == 1e-3
        assert config_get(config, "missing_key", 7) == 7
    assert config_get(None, "epsilon", 1e-6) == 1e-6
    # An explicit None (an empty yaml value) means "use the default".
    assert config_get(_AlgoConfig(), "norm_adv_by_std_in_grpo", True) is True


def test_policy_loss_config_from_any_keeps_defaults_for_missing_keys():
    config = PolicyLossConfig.from_any(OmegaConf.create({"clip_ratio_high": 0.28, "lr": 1e-6}))
    assert config.clip_ratio_high == 0.28 and config.clip_ratio_low == 0.2 and config.clip_ratio_c == 3.0
    same = PolicyLossConfig(clip_ratio_low=0.1)
    assert PolicyLossConfig.from_any(same) is same
    assert PolicyLossConfig.from_any(SimpleNamespace(clip_ratio_low=0.1)) == same


def test_every_policy_loss_parameter_is_an_actor_key_and_reaches_the_loss():
    # The actor worker builds the loss config with PolicyLossConfig.from_any(actor config).
    fields = {f.name for f in dataclasses.fields(PolicyLossConfig)}
    assert fields <= {f.name for f in dataclasses.fields(ActorConfig)}
    changed = {name: getattr(PolicyLossConfig, name) / 2 for name in fields}  # every half is still valid
    assert dataclasses.asdict(PolicyLossConfig.from_any(ActorConfig(**changed))) == changed


def test_policy_loss_problems_name_the_key_value_and_valid_range():
    problems = policy_loss_problems(
        {"kl_cov_ratio": 1.5, "cispo_clip_ratio_low": "x", "clip_cov_lb": 3.0, "clip_cov_ub": 2.0}, "actor."
    )
    assert problems == [
        "actor.cispo_clip_ratio_low='x' is invalid; use a number in [0, 1] (1 removes the lower bound).",
        "actor.kl_cov_ratio=1.5 is invalid; use a fraction of tokens in [0, 1].",
        "actor.clip_cov_lb=3.0 must be < actor.clip_cov_ub=2.0 (the covariance band of Clip-Cov candidates); "
        "swap or widen them.",
    ]
