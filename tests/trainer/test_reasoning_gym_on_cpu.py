"""reasoning-gym as a data source: rows generated before Ray starts, scored by reasoning-gym's own scorer."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from reasoning_gym import get_score_answer_fn
from reasoning_gym.utils import extract_answer

from tests.trainer.helpers import joining, train
from verl_lite.trainer.load import compose_config, load_ppo_config
from verl_lite.trainer.validation import ConfigError

MIX = [
    "+data.reasoning_gym.generators.leg_counting=1",
    "+data.reasoning_gym.generators.basic_arithmetic=3",
    "+data.reasoning_gym.generator_kwargs.basic_arithmetic.max_terms=3",
    "data.reasoning_gym.seed=7",
    "data.reasoning_gym.train_size=8",
    "data.reasoning_gym.val_size=8",
    "+data.reasoning_gym.generator_kwargs.leg_counting.max_animals=3",
    # reasoning-gym's system prompts alone are ~150 tokens of the tiny model's 512
    "data.reasoning_gym.system_prompt=null",
    "data.max_prompt_length=160",
]


def test_a_reasoning_gym_mix_trains_and_validates_per_generator_with_its_scores(tmp_path, cluster):
    history = train(
        tmp_path,
        *joining(cluster),
        *MIX,
        "trainer.total_training_steps=1",
        "trainer.val_before_train=true",
        f"trainer.validation_data_dir={tmp_path / 'val'}",
    )
    train_rows = pd.read_parquet(tmp_path / "grpo_tiny" / "reasoning_gym" / "train.parquet")
    val_rows = pd.read_parquet(tmp_path / "grpo_tiny" / "reasoning_gym" / "val.parquet")
    # weights 1:3 of 8 rows; validation rows are other rows than the training ones
    assert train_rows["data_source"].value_counts().to_dict() == {
        "reasoning_gym/basic_arithmetic": 6,
        "reasoning_gym/leg_counting": 2,
    }
    assert not set(train_rows["extra_info"].map(lambda e: e["entry"])) & set(
        val_rows["extra_info"].map(lambda e: e["entry"])
    )
    validated = next(h for h in history if any(k.startswith("val-core/") for k in h))
    for source in ("leg_counting", "basic_arithmetic"):
        assert 0.0 <= validated[f"val-core/reasoning_gym/{source}/acc/mean@1"] <= 1.0
    # every validation response got exactly the score reasoning-gym's score_answer gives it
    entries = {e["entry"]: json.loads(e["entry"]) for e in val_rows["extra_info"]}
    by_question = {entry["question"]: entry for entry in entries.values()}
    dumped = [json.loads(line) for path in (tmp_path / "val").glob("*.jsonl") for line in path.open()]
    assert len(dumped) == 16  # the 8 validation rows before training and after its step
    for row in dumped:
        entry = next(e for q, e in by_question.items() if q in row["prompt"])
        generator = row["data_source"].removeprefix("reasoning_gym/")
        assert row["score"] == get_score_answer_fn(generator)(extract_answer(row["response"]), entry)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("+data.reasoning_gym.generators.no_such_task=1", "unknown generator(s) ['no_such_task']"),
        ("data.reasoning_gym.generators.leg_counting=0", "weights {'leg_counting': 0} must be positive"),
        (
            "+data.reasoning_gym.generator_kwargs.ab.length=3",
            "generator_kwargs names ['ab'], which are not in",
        ),
        ("data.reasoning_gym.train_size=0", "data.reasoning_gym.train_size=0 must be an integer"),
        ("data.reasoning_gym.system_prompt=shouty", "data.reasoning_gym.system_prompt='shouty' is not valid"),
        ("data.train_files=/some/file.parquet", "data.train_files='/some/file.parquet' must be null"),
    ],
)
def test_a_bad_reasoning_gym_setting_is_refused_before_ray_starts(tmp_path, override, message):
    mix = ["+data.reasoning_gym.generators.leg_counting=1"]
    with pytest.raises(ConfigError) as info:
        load_ppo_config(compose_config("ppo_trainer", [*mix, f"trainer.run_dir={tmp_path}", override]))
    assert message in str(info.value)
    assert not (tmp_path / "grpo_tiny" / "reasoning_gym").exists()
