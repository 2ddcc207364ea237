"""CoMLRL 1.4's documented examples, run as a CoMLRL user has them: only the import line differs
(``comlrl.trainers...`` / ``comlrl.utils.reward_processor`` -> ``verl_lite.trainer.multi_agent``), the model
path is the embedded tiny model (the docs load ``Qwen/Qwen2.5-0.5B``), and where the docs download a dataset
(``trl-lib/tldr``) a few stand-in rows take its place (nothing can be downloaded here). Every trainer setting
the docs write is kept, and the ones they leave out keep CoMLRL's defaults (epochs, samples, tokens, sampling).
Where the docs give only parameter lists (multi-turn, IAC, MAAC), the settings are this file's. Re-typed from
OpenMLRL/CoMLRL's docs:

* the quick start (``docs/content/docs/examples/comlrl-quick-start.md``): MAGRPO, single turn, two loaded models;
* the README's usage (TLDR, a reward reading ``a[0]``), with MAREINFORCE, whose interface the REINFORCE page
  (``docs/content/docs/user-guide/multi-agent-reinforce.md``) says is MAGRPO's; as CoMLRL 1.4.3 itself
  needs, ``agent_model=`` for the README's older ``model=`` and ``num_turns=1`` (the default 2 asks for an
  external transition);
* custom external feedback (``docs/content/docs/user-guide/multi-turn-training.md``): MAGRPO over two turns;
* IAC and MAAC trainer setup (``user-guide/multi-agent-actor-critic.md``, ``user-guide/model-loading.md``);
* shared actor-critic (``docs/content/docs/examples/shared-actor-critic.md``): IAC with a value head on each
  agent's actor (``use_separate_critic=False``) and a buffer of 4 tasks per update.
"""

import math
import os
from functools import partial, wraps

import pytest
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.conftest import start_local_ray

# the one line a CoMLRL user changes (was: from comlrl.trainers.reinforce import ...; from comlrl.utils...)
from verl_lite.trainer.multi_agent import (
    IACConfig,
    IACTrainer,
    MAACConfig,
    MAACTrainer,
    MAGRPOConfig,
    MAGRPOTrainer,
    MAREINFORCEConfig,
    MAREINFORCETrainer,
    RewardProcessors,
)
from verl_lite.trainer.validation import EMBEDDED_MODEL

MODEL = EMBEDDED_MODEL  # the docs' "Qwen/Qwen2.5-0.5B"

STORY_PROMPTS = [  # the quick start's ten creative prompts, in this file's words
    "Describe a town floating above the sea:",
    "Make up a holiday and say how people celebrate it:",
    "Tell a bedtime story to a sleepy giant:",
    "Explain how a time machine might work:",
    "Tell a joke about penguins:",
    "Describe a day without the internet:",
    "Invent a superhero with an odd power:",
    "Write a scene where the sun gives advice:",
    "Invent a new kind of vegetable:",
    "Design a school on the moon:",
]
# Stand-ins for trl-lib/tldr rows (nothing is downloaded here): a post to summarise per row. The embedded model
# learnt short arithmetic stories, so these are such stories: it answers them in ~20 tokens, where on other
# text it writes until max_new_tokens (CoMLRL's default 256), which would make these runs minutes long.
POSTS = [
    "Summarise this post in one line: Tom has 3 apples. He buys 4 more and gives away 2. How many apples does Tom have now?",
    "Summarise this post in one line: Anna had 12 coins. She spent 5 on bread and found 3 more. How many coins does Anna have?",
]


@pytest.fixture(scope="module", autouse=True)
def user_folder(tmp_path_factory):
    """One Ray for every example, and a scratch working folder: the examples write relative paths."""
    start_local_ray()
    folder = tmp_path_factory.mktemp("comlrl_user")
    before = os.getcwd()
    os.chdir(folder)
    yield folder
    os.chdir(before)


def recorded(fn, calls):
    """``fn`` unchanged, its arguments and result appended to ``calls`` (to compare with what was logged)."""

    @wraps(fn)  # keeps fn's signature: the trainer passes batch_items only to functions that take it
    def spy(*args, **kwargs):
        out = fn(*args, **kwargs)
        calls.append((args, kwargs, out))
        return out

    return spy


# ---- the quick start: MAGRPO, one turn, two loaded models, a length-ratio reward scaled by 100 ------------
def proper_length_ratio_reward(completions1, completions2, target_min=2.0, target_max=3.0):
    # full marks when agent 2 writes 2-3x agent 1's characters, decaying exponentially outside that band
    rewards = []
    for first, second in zip(completions1, completions2):
        if len(first) == 0:
            rewards.append(0.0)
            continue
        ratio = len(second) / len(first)
        if ratio < target_min:
            gap = target_min - ratio
        elif ratio > target_max:
            gap = ratio - target_max
        else:
            gap = 0.0
        rewards.append(float(math.exp(-gap)))
    return rewards


@pytest.fixture(scope="module")
def quick_start():
    train_dataset = Dataset.from_dict({"prompt": STORY_PROMPTS})
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    agents = [AutoModelForCausalLM.from_pretrained(MODEL) for _ in range(2)]
    config = MAGRPOConfig(
        num_train_epochs=3,
        agent_learning_rate=5e-5,
        logging_steps=10,
        num_generations=8,
        num_turns=1,
        max_new_tokens=128,
    )
    wandb_config = {"project": "your-project-name", "entity": "your-entity-name", "name": "length-ratio-demo"}
    calls = []
    configured_reward_func = partial(proper_length_ratio_reward, target_min=2, target_max=3)
    # loaded models are read back from their folders: the user is told that edits in memory are not trained
    with pytest.warns(UserWarning, match=r"agents given as loaded models are read from their name_or_path"):
        trainer = MAGRPOTrainer(
            agents=agents,
            reward_func=recorded(configured_reward_func, calls),
            reward_processor=RewardProcessors.scale(factor=100.0),
            args=config,
            train_dataset=train_dataset,
            tokenizer=tokenizer,
            wandb_config=wandb_config,
        )
    output_dir = "./magrpo_multi_reward_output"
    try:
        trainer.train()
        trainer.save_model(f"{output_dir}/models")
    finally:
        trainer.close()
    return trainer, calls, output_dir, agents


def test_quick_start_trains_two_tasks_per_update_on_the_users_scaled_reward(quick_start):
    trainer, calls, _, _ = quick_start
    # 10 tasks x 3 epochs with CoMLRL's default rollout_buffer_size=2: 15 updates of 2 tasks x 8 joint answers,
    # 16 env steps each, so logging_steps=10 logs every update
    assert [h["task"] for h in trainer.history] == [2.0 * (i + 1) for i in range(15)]
    assert [h["env_step"] for h in trainer.history] == [16 * (i + 1) for i in range(15)]
    # CoMLRL calls the reward once per joint answer, one completion per agent
    assert len(calls) == 30 * 8 and all(len(a) == len(b) == 1 for (a, b), _, _ in calls)
    for i, logged in enumerate(trainer.history):  # what each update logged is what its 16 calls returned
        update = calls[16 * i : 16 * (i + 1)]
        rewards = [100.0 * out[0] for _, _, out in update]
        assert logged["turn_1/reward_mean"] == pytest.approx(sum(rewards) / 16)
        assert logged["turn_1/reward_max"] == pytest.approx(max(rewards))
        first_chars = sum(len(a[0]) for (a, _), _, _ in update) / 16
        assert logged["turn_1/agent_0/response_chars"] == pytest.approx(first_chars)


def test_quick_start_save_model_writes_each_trained_agent(quick_start):
    trainer, _, output_dir, agents = quick_start
    import torch

    # a task whose joint answers scored differently moves the weights (equal rewards: zero advantages)
    assert any(h["turn_1/reward_max"] > h["turn_1/reward_min"] for h in trainer.history), trainer.history

    for i in range(2):
        saved = AutoModelForCausalLM.from_pretrained(f"{output_dir}/models/agent_{i}")
        AutoTokenizer.from_pretrained(f"{output_dir}/models/agent_{i}")
        before, after = agents[i].state_dict(), saved.state_dict()
        assert before.keys() == after.keys()
        assert any(not torch.equal(before[k], after[k]) for k in before), "the update changes the weights"


# ---- the README's usage with MAREINFORCE (the REINFORCE page: same interface as MAGRPO) ------------------
def test_readme_usage_with_mareinforce_scores_each_joint_answer_with_the_one_value_lambda():
    calls = []
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    # docs: load_dataset("trl-lib/tldr", split="train").select(range(128))
    dataset = Dataset.from_dict({"prompt": POSTS[:1]})
    args = MAREINFORCEConfig(num_turns=1)
    assert args.advantage_mode == "raw"  # REINFORCE without a baseline
    trainer = MAREINFORCETrainer(
        agent_model=MODEL,  # the README's `model=` is pre-1.4; CoMLRL 1.4.3 takes agent_model
        num_agents=2,
        tokenizer=tokenizer,
        train_dataset=dataset,
        # the README's reward: reads the first completion of each agent and returns one value
        reward_func=recorded(lambda a, b: [abs(max(len(b[0]), 1) / max(len(a[0]), 1) - 3.0)], calls),
        formatters=[lambda example: example["prompt"]] * 2,
        args=args,
    )
    with trainer:
        history = trainer.train()
    # CoMLRL's defaults: 20 epochs of the one row, 4 joint answers each; logging_steps=50 env steps logs the
    # first update, then the first one 50 or more env steps later
    assert [h["env_step"] for h in history] == [4, 56]
    # one call per joint answer, each scoring one completion per agent; no reward_processor
    assert len(calls) == 20 * 4 and all(len(a) == len(b) == 1 for (a, b), _, _ in calls)
    for logged in history:
        returned = [out[0] for _, _, out in calls[logged["env_step"] - 4 : logged["env_step"]]]
        assert logged["turn_1/reward_mean"] == pytest.approx(sum(returned) / 4)
        assert logged["turn_1/reward_min"] == pytest.approx(min(returned))


# ---- custom external feedback: MAGRPO over two turns -------------------------------------------------------
def custom_external(prompt, agent_completions, num_agents, prompt_history_per_agent=None,
                    response_history_per_agent=None):  # fmt: skip
    # each agent sees the task again with its own last answer and is asked to improve it
    return [f"{prompt}\nYour last answer: {agent_completions[i]}\nImprove it." for i in range(num_agents)]


def multi_turn_run(**threshold):
    """The docs' two-turn MAGRPO with the custom external transition; returns its history and the calls."""
    calls = []
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    trainer = MAGRPOTrainer(
        agent_model=MODEL,
        num_agents=2,
        tokenizer=tokenizer,
        train_dataset=Dataset.from_dict({"prompt": STORY_PROMPTS[:1]}),
        reward_func=partial(proper_length_ratio_reward, target_min=2, target_max=3),
        external_transition=recorded(custom_external, calls),
        args=MAGRPOConfig(
            num_turns=2, num_train_epochs=1, num_generations=2, max_new_tokens=8, logging_steps=1, **threshold
        ),
    )
    with trainer:
        return trainer.train(), calls


def test_multi_turn_as_documented_is_cut_after_turn_1_as_in_comlrl():
    # the length-ratio reward is >= 0, above CoMLRL's default early_termination_threshold (-0.2): the
    # root's mean reward exceeds it, so no joint answer continues (CoMLRL behaves the same)
    [step], calls = multi_turn_run()
    assert calls == [] and step["env_step"] == 2
    assert "turn_1/reward_mean" in step and not any(k.startswith("turn_2/") for k in step)


def test_multi_turn_transition_gets_comlrl_keywords_and_every_turn_is_scored():
    [step], calls = multi_turn_run(early_termination_threshold=None)  # grow the whole tree
    assert {"turn_1/reward_mean", "turn_2/reward_mean", "turn_2/expected_return"} <= set(step)
    # each of turn 1's 2 joint answers continues in a node of 2 joint answers: 2 + 2 x 2 rewards
    assert len(calls) == 2 and step["env_step"] == 6
    args, kwargs, out = calls[0]
    assert args == ()  # called by keyword, as CoMLRL does
    assert set(kwargs) == {
        "prompt",
        "agent_completions",
        "num_agents",
        "prompt_history_per_agent",
        "response_history_per_agent",
    }
    assert kwargs["prompt"] == STORY_PROMPTS[0] and kwargs["num_agents"] == 2
    assert len(kwargs["agent_completions"]) == 2
    assert [len(h) for h in kwargs["prompt_history_per_agent"]] == [1, 1]
    assert [h[-1] for h in kwargs["response_history_per_agent"]] == list(kwargs["agent_completions"])
    assert out[0].startswith(STORY_PROMPTS[0])


# ---- IAC and MAAC, the actor-critic pages' trainer setup ------------------------------------------------
def length_balance_reward(agent1, agent2):
    # the shared actor-critic page's reward: close lengths score high (reads one completion per agent)
    a, b = agent1[0], agent2[0]
    return [1.0 - abs(len(a) - len(b)) / max(len(a), len(b), 1)]


def actor_critic_args(config_cls):
    return config_cls(num_agents=2, num_turns=1, num_train_epochs=1, max_new_tokens=8, logging_steps=1)


def test_iac_with_a_separate_critic_per_agent():
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    trainer = IACTrainer(
        agent_model=MODEL,
        critic_model=MODEL,
        tokenizer=tokenizer,
        train_dataset=Dataset.from_dict({"prompt": POSTS[:1]}),
        reward_func=length_balance_reward,
        formatters=[lambda ex: ex["prompt"]] * 2,
        args=actor_critic_args(IACConfig),
    )
    with trainer:
        history = trainer.train()
        critics = {id(agent.groups.critic) for agent in trainer._loop.agents}
    assert trainer.args.num_generations == 1  # CoMLRL's actor-critic default
    assert len(critics) == 2
    assert len(history) == 1 and 0.0 <= history[0]["turn_1/reward_mean"] <= 1.0
    assert {"policy_0/critic/vf_loss", "policy_1/critic/vf_loss"} <= set(history[0])


def test_maac_with_one_centralised_critic():
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    trainer = MAACTrainer(
        agent_model=None,
        agents=[MODEL, MODEL],  # docs: two coder models of different sizes
        critic_model=MODEL,  # docs: a larger one
        critics=None,
        num_agents=2,
        tokenizer=tokenizer,
        train_dataset=Dataset.from_dict({"prompt": POSTS[:1]}),
        reward_func=length_balance_reward,
        formatters=[lambda ex: ex["prompt"]] * 2,
        args=actor_critic_args(MAACConfig),
    )
    with trainer:
        history = trainer.train()
        critic = trainer._loop.critic
        per_agent = [agent.groups.critic for agent in trainer._loop.agents]
    assert critic is not None and per_agent[1] is None  # one critic, in the first agent's processes
    assert len(history) == 1 and "critic/vf_loss" in history[0]  # one critic update over both agents


# ---- shared actor-critic: a value head on each actor, trained in the actor's loss -------------------------
def test_shared_actor_critic_trains_a_value_head_on_each_actor():
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    args = IACConfig(
        num_agents=2,
        num_turns=1,
        use_separate_critic=False,
        rollout_buffer_size=4,
        train_batch_size=4,
    )
    trainer = IACTrainer(
        agent_model=MODEL,
        tokenizer=tokenizer,
        # docs: load_dataset("trl-lib/tldr", split="train").select(range(128)); 4 rows: one update per epoch
        train_dataset=Dataset.from_dict({"prompt": POSTS * 2}),
        reward_func=length_balance_reward,
        formatters=[lambda ex: ex["prompt"]] * 2,
        args=args,
    )
    with trainer:
        history = trainer.train()
        agents = trainer._loop.agents
        critics = [agent.groups.critic for agent in agents]
        configs = [agent.config for agent in agents]
    assert critics == [None, None]  # no value model beside the actors
    assert all(c.actor_rollout_ref.actor.value_head.enable for c in configs)
    # CoMLRL's actor-critic defaults: 40 epochs, each one update of the 4 tasks (one answer per agent each),
    # every update logged; the value loss is part of each actor's update (no critic optimiser)
    assert [step["task"] for step in history] == [4.0 * (i + 1) for i in range(40)]
    for step in history:
        for k in range(2):
            assert step[f"policy_{k}/critic/vf_loss"] > 0 and f"policy_{k}/critic/grad_norm" not in step
            assert f"policy_{k}/actor/grad_norm" in step
    with pytest.raises(ValueError, match="got a critic model with args.use_separate_critic=False"):
        IACTrainer(agent_model=MODEL, critic_model=MODEL, reward_func=length_balance_reward, args=args)
