"""A reward model trained by main_rm drives GRPO through the RewardModel role (reward.reward_model.enable)."""

import json
import math

import pytest

from tests.conftest import start_local_ray
from tests.trainer.helpers import FAST
from verl_lite import main_ppo, main_rm
from verl_lite.trainer.load import compose_config, load_ppo_config
from verl_lite.trainer.validation import EMBEDDED_MODEL, ConfigError


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    """A tiny Bradley-Terry reward model on the embedded model, exported by main_rm."""
    out = tmp_path_factory.mktemp("rm")
    start_local_ray()
    cfg = compose_config(
        "rm_trainer",
        [
            f"trainer.default_local_dir={out}/ckpt",
            f"trainer.run_dir={out}/runs",
            "trainer.logger=[jsonl]",
            "trainer.total_training_steps=4",
            "trainer.test_freq=-1",
            "data.synthetic_pairs=16",
            "data.val_ratio=0",
            "data.train_batch_size=4",
            "data.micro_batch_size_per_gpu=4",
        ],
    )
    main_rm.run(main_rm.load_config(cfg))
    return str(out / "ckpt" / "hf")


def test_grpo_adds_reward_model_scores_to_the_rule_scores(rm_dir, tmp_path):
    start_local_ray()
    cfg = compose_config(
        "ppo_trainer",
        [
            *FAST,
            "trainer.total_training_steps=2",
            f"trainer.run_dir={tmp_path}",
            "reward.reward_model.enable=true",
            "reward.reward_model.combine=add",
            f"reward.reward_model.model.path={rm_dir}",
            "reward.reward_model.micro_batch_size_per_gpu=3",
            "reward.reward_model.model.trust_remote_code=true",
        ],
    )
    history = main_ppo.run(load_ppo_config(cfg))
    assert [h["step"] for h in history] == [1, 2]
    for h in history:
        rm_mean = h["critic/rm_score/mean"]
        assert math.isfinite(rm_mean) and h["critic/rm_score/min"] < h["critic/rm_score/max"]
        # add: every final score is rule score (1 when correct, else 0, so its mean is acc) + rm score
        assert h["critic/score/mean"] == pytest.approx(h["critic/acc/mean"] + rm_mean, abs=1e-5)
        assert h["critic/score/mean"] != h["critic/acc/mean"]  # the rewards are not the rule-based ones
        assert h["timing_s/reward"] > 0
    logged = [
        json.loads(line) for line in (tmp_path / "grpo_tiny" / "metrics.jsonl").read_text().splitlines()
    ]
    assert all("critic/rm_score/mean" in entry for entry in logged)


def test_a_causal_lm_folder_is_rejected_as_reward_model():
    cfg = compose_config(
        "ppo_trainer", ["reward.reward_model.enable=true", f"reward.reward_model.model.path={EMBEDDED_MODEL}"]
    )
    with pytest.raises(ConfigError, match="reward.reward_model.model.path=.*not a sequence classifier"):
        load_ppo_config(cfg)
