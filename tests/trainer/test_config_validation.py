"""Bad configurations are rejected before Ray starts, each with one sentence naming key, value and fix."""

import os
import subprocess
import sys

import pandas as pd
import pytest

from verl_lite.trainer.load import compose_config, load_ppo_config
from verl_lite.trainer.validation import EMBEDDED_DATA, EMBEDDED_MODEL


def load(*overrides):
    return load_ppo_config(compose_config("ppo_trainer", overrides))


def test_default_config_is_valid_and_points_at_the_embedded_task():
    config = load()
    assert config.model.path.endswith(os.path.join("assets", "tiny_model"))
    assert config.data.train_files.endswith("train.parquet") and os.path.exists(config.data.val_files)


@pytest.mark.parametrize(
    "overrides, placement, engine",
    [
        ([], "hybrid", "naive"),
        (["trainer.mode=one_step_off"], "standalone", "ray"),
        (
            ["trainer.mode=fully_async", "trainer.replay_buffer.max_off_policy_threshold=1"],
            "standalone",
            "ray",
        ),
        (["actor_rollout_ref.rollout.mode=standalone"], "standalone", "ray"),
    ],
)
def test_one_key_per_intent_the_mode_implies_the_placement_and_the_placement_its_weight_sync(
    overrides, placement, engine
):
    rollout = load(*overrides).actor_rollout_ref.rollout
    assert (rollout.mode, rollout.checkpoint_engine) == (placement, engine)


BAD_CONFIGS = [
    (
        ["data.train_batch_size=6", "actor_rollout_ref.actor.ppo_mini_batch_size=4"],
        "data.train_batch_size=6 must be a multiple of actor_rollout_ref.actor.ppo_mini_batch_size=4",
    ),
    (
        [
            "trainer.n_gpus_per_node=3",
            "actor_rollout_ref.rollout.n=2",
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        ],
        "must divide evenly over the 3 data-parallel ranks",
    ),
    (["algorithm.adv_estimator=grpoo"], "algorithm.adv_estimator='grpoo' is not registered; known: "),
    (
        ["actor_rollout_ref.actor.policy_loss=ppo2"],
        "actor_rollout_ref.actor.policy_loss='ppo2' is not registered",
    ),
    (
        ["actor_rollout_ref.rollout.name=sglang"],
        # the known names start with hf (test modules may register probe backends after it)
        "actor_rollout_ref.rollout.name='sglang' is not registered; known: hf,",
    ),
    (
        ["actor_rollout_ref.engine.name=megatron"],
        "actor_rollout_ref.engine.name='megatron' is not registered",
    ),
    (
        ["trainer.mode=async"],
        # (the list also holds the modes other tests register in this process)
        "trainer.mode='async' is not registered; known: ",
    ),
    (["reward.reward_manager=prime"], "reward.reward_manager='prime' is not registered"),
    (
        ["data.train_files=/nonexistent/train.parquet"],
        "data.train_files: file '/nonexistent/train.parquet' does not exist",
    ),
    (["data.max_prompt_length=4000", "data.max_response_length=4000"], "exceeds the model's context"),
    (["algorithm.adv_estimator=gae", "critic.enable=false"], "algorithm.adv_estimator='gae' needs a critic"),
    (
        ["actor_rollout_ref.actor.value_head.enable=true"],
        "actor_rollout_ref.actor.value_head.enable=true trains values that algorithm.adv_estimator='grpo' never",
    ),
    (
        [
            "algorithm.adv_estimator=gae",
            "actor_rollout_ref.actor.value_head.enable=true",
            "critic.enable=true",
        ],
        "value_head.enable=true and critic.enable=true both learn the values; keep one of them.",
    ),
    (
        [
            "algorithm.adv_estimator=gae",
            "actor_rollout_ref.actor.value_head.enable=true",
            "actor_rollout_ref.actor.value_head.hidden_dim=0",
        ],
        "actor_rollout_ref.actor.value_head.hidden_dim=0 must be a positive integer or null.",
    ),
    (
        [
            "trainer.mode=maac",
            "algorithm.adv_estimator=gae",
            "actor_rollout_ref.actor.value_head.enable=true",
        ],
        "trainer.mode='maac' values every agent's answers with one centralised critic",
    ),
    (
        ["actor_rollout_ref.rollout.n=1"],
        "algorithm.adv_estimator='grpo' compares samples of one prompt and needs",
    ),
    (
        [
            "algorithm.adv_estimator=remax",
            "reward.reward_model.enable=true",
            "reward.reward_model.model.path=/nonexistent/rm",
        ],
        "algorithm.adv_estimator='remax' scores a greedy baseline with the rule-based reward manager only",
    ),
    (
        [
            "data.default_data_source=my_task",
            "data.train_files=${oc.env:PWD}/tests/fixtures/no_source.jsonl",
            "data.val_files=null",
        ],
        "my_task",
    ),
    (["+actor_rollout_ref.actor.optimz.lr=1"], "unknown key 'actor_rollout_ref.actor.optimz'"),
    (
        ["actor_rollout_ref.actor.old_log_prob=never"],
        "actor_rollout_ref.actor.old_log_prob='never' is not valid",
    ),
    (
        ["actor_rollout_ref.actor.sapo_tau_neg=0"],
        "actor_rollout_ref.actor.sapo_tau_neg=0 is invalid; use a temperature > 0.",
    ),
    (
        ["actor_rollout_ref.engine.param_dtype=bf16"],
        "actor_rollout_ref.engine.param_dtype='bf16' is not valid; use bfloat16 or float32.",
    ),
    (
        ["actor_rollout_ref.engine.backend=mpi"],
        "actor_rollout_ref.engine.backend='mpi' is not valid; use one of auto, gloo, nccl.",
    ),
    (
        ["actor_rollout_ref.actor.loss_scale_factor=0"],
        "actor_rollout_ref.actor.loss_scale_factor=0 is invalid; use a number of tokens > 0, or null.",
    ),
    (
        ["actor_rollout_ref.actor.clip_cov_lb=6.0"],
        "actor_rollout_ref.actor.clip_cov_lb=6.0 must be < actor_rollout_ref.actor.clip_cov_ub=5.0",
    ),
    (
        ["trainer.mode=one_step_off", "actor_rollout_ref.rollout.mode=hybrid"],
        "trainer.mode='one_step_off' overlaps generation and training, so it needs "
        "actor_rollout_ref.rollout.mode=standalone (got 'hybrid'); leave it null to get it.",
    ),
    (
        [
            "trainer.mode=fully_async",
            "trainer.parameter_sync_step=3",
            "trainer.replay_buffer.max_off_policy_threshold=1",
        ],
        "trainer.mode=fully_async needs trainer.replay_buffer.max_off_policy_threshold >= "
        "trainer.parameter_sync_step - 1 = 2 (got 1)",
    ),
    (
        ["trainer.parameter_sync_step=0"],
        "trainer.parameter_sync_step=0 is invalid; use an integer >= 1",
    ),
    (
        ["algorithm.rollout_correction.rollout_is=tis"],
        "algorithm.rollout_correction.rollout_is='tis' is invalid; use null or one of geometric, sequence, token.",
    ),
    (
        [
            "algorithm.rollout_correction.rollout_rs=sequence",
            "algorithm.rollout_correction.rollout_rs_threshold_lower=3",
        ],
        "algorithm.rollout_correction.rollout_rs_threshold_lower=3 must be < "
        "algorithm.rollout_correction.rollout_rs_threshold=2.0",
    ),
    (
        ["actor_rollout_ref.actor.kl_cov_ratio=2"],
        "actor_rollout_ref.actor.kl_cov_ratio=2 is invalid; use a fraction of tokens in [0, 1].",
    ),
    (["algorithm.epsilon=0"], "algorithm.epsilon=0 is invalid; use a number > 0"),
    (
        ["trainer.replay_buffer.off_policy_strategy=skip"],
        "trainer.replay_buffer.off_policy_strategy='skip' is invalid; use one of drop, wait.",
    ),
    (
        ["trainer.replay_buffer.max_off_policy_threshold=-1"],
        "trainer.replay_buffer.max_off_policy_threshold=-1 is invalid; use an integer >= 0",
    ),
    (
        ["algorithm.filter_groups.max_num_gen_batches=2.5"],
        "algorithm.filter_groups.max_num_gen_batches=2.5 is invalid; use an integer",
    ),
    (["data.val_batch_size=0"], "data.val_batch_size=0 is invalid; use a positive integer"),
    (
        ["actor_rollout_ref.rollout.checkpoint_engine=nccl"],
        "actor_rollout_ref.rollout.checkpoint_engine='nccl' does not serve actor_rollout_ref.rollout.mode='hybrid'",
    ),
    (
        ["actor_rollout_ref.rollout.checkpoint_engine=ray"],
        "actor_rollout_ref.rollout.checkpoint_engine='ray' does not serve actor_rollout_ref.rollout.mode='hybrid'; "
        "use one of naive (or leave it null).",
    ),
    (
        ["actor_rollout_ref.rollout.mode=standalone", "actor_rollout_ref.rollout.checkpoint_engine=nccl"],
        "actor_rollout_ref.rollout.checkpoint_engine='nccl' is not driven by main_ppo's trainer yet",
    ),
    (
        ["actor_rollout_ref.rollout.mode=standalone", "actor_rollout_ref.rollout.checkpoint_engine=naive"],
        "actor_rollout_ref.rollout.checkpoint_engine='naive' does not serve actor_rollout_ref.rollout.mode="
        "'standalone'; use one of ray (or leave it null).",
    ),
    (
        [
            "actor_rollout_ref.rollout.mode=standalone",
            "actor_rollout_ref.rollout.max_restarts=-1",
        ],
        "actor_rollout_ref.rollout.max_restarts=-1 is not valid; use an integer >= 0",
    ),
    (
        ["actor_rollout_ref.rollout.mode=remote"],
        "actor_rollout_ref.rollout.mode='remote' is not valid; use one of hybrid, standalone",
    ),
    (
        ["actor_rollout_ref.rollout.agent.num_workers=0"],
        "actor_rollout_ref.rollout.agent.num_workers=0 is not valid; use null or an integer >= 1",
    ),
    (
        ["actor_rollout_ref.rollout.agent.default_agent_loop=react"],
        # (the list also holds the loops other tests register in this process)
        "actor_rollout_ref.rollout.agent.default_agent_loop='react' is not registered; known: ",
    ),
    (
        ["actor_rollout_ref.rollout.agent.openai.timeout_s=0"],
        "actor_rollout_ref.rollout.agent.openai.timeout_s=0 must be a positive number of seconds.",
    ),
    (
        ["actor_rollout_ref.rollout.agent.default_agent_loop=openai_agent"],
        "actor_rollout_ref.rollout.agent.openai.function.path is null; the openai_agent loop needs the python file",
    ),
    (
        ["actor_rollout_ref.rollout.checkpoint_engine=gloo"],
        "actor_rollout_ref.rollout.checkpoint_engine='gloo' is not registered; known: naive, nccl, ray.",
    ),
    (
        ["actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side=both"],
        "actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side='both' must be one of left, middle, right.",
    ),
    (
        ["actor_rollout_ref.rollout.multi_turn.max_assistant_turns=0"],
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=0 must be a positive integer or null",
    ),
    (
        ["actor_rollout_ref.rollout.multi_turn.max_parallel_calls=0"],
        "actor_rollout_ref.rollout.multi_turn.max_parallel_calls=0 must be a positive integer.",
    ),
    (
        ["actor_rollout_ref.rollout.multi_turn.format=json"],
        "actor_rollout_ref.rollout.multi_turn.format='json' is not a registered tool-call parser; known: hermes",
    ),
    (
        ["actor_rollout_ref.rollout.multi_turn.tool_timeout_s=0"],
        "actor_rollout_ref.rollout.multi_turn.tool_timeout_s=0 must be a positive number of seconds.",
    ),
    (
        ["actor_rollout_ref.rollout.multi_turn.tool_config_path=/nonexistent/tools.yaml"],
        "actor_rollout_ref.rollout.multi_turn.tool_config_path: tool config /nonexistent/tools.yaml does not exist",
    ),
    (["trainer.resume_mode=latest"], "trainer.resume_mode='latest' is not valid; use one of auto, disable"),
    (
        ["trainer.resume_mode=resume_path", "trainer.resume_from_path=/nonexistent/global_step_9"],
        "trainer.resume_from_path='/nonexistent/global_step_9' is not a complete checkpoint",
    ),
    (["actor_rollout_ref.model.lora_rank=-1"], "actor_rollout_ref.model.lora_rank=-1 must be a non-negative"),
    (
        ["actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora_dropout=1.0"],
        "actor_rollout_ref.model.lora_dropout=1.0 must be in [0, 1)",
    ),
    (
        ["critic.enable=true", "critic.model.lora_rank=8", "critic.model.target_modules=[]"],
        "critic.model.target_modules=[] must be all-linear or a non-empty list of module names",
    ),
    (
        ["actor_rollout_ref.model.lora_rank=1024", "actor_rollout_ref.rollout.name=vllm"],
        "actor_rollout_ref.model.lora_rank=1024 is above 512, the largest LoRA rank vLLM serves",
    ),
]


@pytest.mark.parametrize("overrides,message", BAD_CONFIGS)
def test_bad_config_is_rejected_with_a_clear_sentence_before_ray_starts(
    overrides, message, tmp_path, ray_must_not_start
):
    if any("no_source.jsonl" in o for o in overrides):
        path = tmp_path / "no_source.jsonl"
        path.write_text('{"prompt": "1 + 1 =", "reward_model": {"ground_truth": "2"}}\n')
        overrides = [o.replace("${oc.env:PWD}/tests/fixtures/no_source.jsonl", str(path)) for o in overrides]
    with pytest.raises(ValueError) as info:
        load(*overrides)
    assert message in str(info.value)


def test_remax_needs_only_one_sample_per_prompt():
    config = load("algorithm.adv_estimator=remax", "actor_rollout_ref.rollout.n=1")
    assert config.actor_rollout_ref.rollout.n == 1 and not config.use_critic


def test_user_files_become_absolute_for_remote_processes(monkeypatch, tmp_path):
    (tmp_path / "ext.py").write_text("")
    (tmp_path / "reward.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n"
    )
    monkeypatch.chdir(tmp_path)
    config = load("trainer.extensions=[ext.py]", "reward.custom_reward_function.path=reward.py")
    assert config.trainer.extensions == [str(tmp_path / "ext.py")]
    assert config.reward.custom_reward_function.path == str(tmp_path / "reward.py")


def test_corrupt_train_parquet_is_rejected_naming_key_and_file_before_ray_starts(
    tmp_path, ray_must_not_start
):
    bad = tmp_path / "train.parquet"
    bad.write_bytes(b"PAR1 cut short")
    with pytest.raises(ValueError) as info:
        load(f"data.train_files={bad}", "data.val_files=null")
    assert f"- data.train_files: cannot read {str(bad)!r} (ArrowInvalid: " in str(info.value)


def test_main_ppo_exits_2_with_one_line_naming_an_unreadable_val_file(tmp_path):
    bad = tmp_path / "val.jsonl"
    bad.write_text('{"prompt": "1 + 1 ="}\n{not json\n')
    # The CLI path a user sees: Hydra, load_ppo_config, run_cli's exit code and message.
    proc = subprocess.run(
        [sys.executable, "-m", "verl_lite.main_ppo", f"data.val_files={bad}", f"hydra.run.dir={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"- data.val_files: cannot read {str(bad)!r}: line 2 is not JSON" in proc.stderr


def test_data_file_without_a_usable_row_is_rejected_with_its_skip_counts_before_ray_starts(
    tmp_path, ray_must_not_start
):
    rows = pd.read_parquet(os.path.join(EMBEDDED_DATA, "train.parquet")).head(120)
    rows["reward_model"] = [{"style": "rule", "ground_truth": None}] * 100 + list(rows["reward_model"][100:])
    rows.loc[100:, "prompt"] = None  # the last 20 have a ground truth but no prompt
    bad = tmp_path / "no_answers.parquet"
    rows.to_parquet(bad)
    with pytest.raises(ValueError) as info:
        load(f"data.val_files={bad}")
    assert (
        f"- data.val_files: 0 usable rows in {str(bad)!r} (120 skipped: 100 missing_ground_truth, "
        "20 missing_prompt)."
    ) in str(info.value)
    assert "data.train_files" not in str(info.value)  # the embedded train file has usable rows


def test_model_folder_whose_config_or_tokenizer_cannot_load_is_rejected_naming_it(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    for name in os.listdir(EMBEDDED_MODEL):
        if not name.endswith(".safetensors"):  # the weights are never read before Ray starts
            (model / name).write_bytes(open(os.path.join(EMBEDDED_MODEL, name), "rb").read())
    (model / "config.json").write_text('{"model_type": "qwen2", "hidden_')  # cut short while copying
    (tmp_path / "tok").mkdir()  # an empty tokenizer folder
    with pytest.raises(ValueError) as info:
        load(f"actor_rollout_ref.model.path={model}")
    assert (
        f"- actor_rollout_ref.model.path={str(model)!r}: cannot load the model config (JSONDecodeError: "
    ) in str(info.value)
    (model / "config.json").write_text(open(os.path.join(EMBEDDED_MODEL, "config.json")).read())
    with pytest.raises(ValueError) as info:
        load(
            f"actor_rollout_ref.model.path={model}",
            f"actor_rollout_ref.model.tokenizer_path={tmp_path / 'tok'}",
        )
    assert (
        f"- actor_rollout_ref.model.tokenizer_path={str(tmp_path / 'tok')!r}: cannot load the tokenizer ("
    ) in str(info.value)
    assert load(f"actor_rollout_ref.model.path={model}").model.path == str(model)  # repaired: accepted
