"""Reading hyperparameters from any config shape (verl_lite/algorithms/config.py)."""

from dataclasses import dataclass
from types import SimpleNamespace

from omegaconf import OmegaConf

from verl_lite.algorithms import PolicyLossConfig, config_get


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
