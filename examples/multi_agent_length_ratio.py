"""Two agents, one joint reward: the length-ratio task of CoMLRL's training setup, trained with MAGRPO.

A "brief" and a "detailed" agent answer the same task; the joint reward is exp(-distance) of the ratio
len(detailed) / len(brief) to the task's [target_min, target_max] band. It measures characters, not
quality, and the agents generate independently. Runs on the embedded tiny model (CPU, no network)::

    python examples/multi_agent_length_ratio.py            # train, evaluate, write eval-metrics.json
    python examples/multi_agent_length_ratio.py --help
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from datasets import Dataset

from verl_lite.trainer.multi_agent import (
    IACConfig,
    IACTrainer,
    MAACConfig,
    MAACTrainer,
    MAGRPOConfig,
    MAGRPOTrainer,
)

# trainer and its settings class
TRAINERS = {
    "magrpo": (MAGRPOTrainer, MAGRPOConfig),
    "iac": (IACTrainer, IACConfig),
    "maac": (MAACTrainer, MAACConfig),
}

tasks = Dataset.from_dict(
    {
        "prompt": [
            "Describe a city in the clouds.",
            "Invent a new holiday.",
            "Write a bedtime story for a dragon.",
            "Explain how teleportation might work.",
            "Tell a story about dinosaurs.",
            "Describe a world without electricity.",
            "Create a superhero with a unique power.",
            "Write a scene where the moon talks.",
            "Invent a new type of fruit.",
            "Design a playground on Mars.",
        ],
        "target_min": [2.0] * 10,
        "target_max": [3.0] * 10,
    }
)
split = tasks.train_test_split(test_size=0.2, seed=42)
train_dataset = split["train"]
eval_dataset = split["test"]


def brief_formatter(item):
    return f"Write a short response to this task:\n{item['prompt']}"


def detailed_formatter(item):
    return f"Write a detailed response to this task:\n{item['prompt']}"


formatters = [brief_formatter, detailed_formatter]


def reward_func(brief_completions, detailed_completions, *, batch_items):
    item = batch_items[0]
    rewards = []
    for brief, detailed in zip(brief_completions, detailed_completions):
        if not brief:
            rewards.append(0.0)
            continue
        ratio = len(detailed) / len(brief)
        distance = max(item["target_min"] - ratio, ratio - item["target_max"], 0.0)
        rewards.append(math.exp(-distance))
    return rewards


def eval_logger(*, agent_completions_turns, batch_items, prompts):
    return [
        {
            f"turn_{turn + 1}/response_chars": sum(len(agent[row][turn]) for agent in agent_completions_turns)
            / len(agent_completions_turns)
            for turn in range(len(agent_completions_turns[0][row]))
        }
        for row in range(len(batch_items))
    ]


def eval_aggregator(rows, *, num_turns):
    return (
        {
            key: sum(row[key] for row in rows) / len(rows)
            for turn in range(num_turns)
            for key in [f"turn_{turn + 1}/response_chars"]
        }
        if rows
        else {}
    )


def metrics_callback(rollouts):
    """IAC / MAAC's custom metric (they take this instead of eval_logger / eval_aggregator)."""
    if not rollouts:
        return {}
    return {"response_chars": sum(len(sample.completion) for sample in rollouts) / len(rollouts)}


def check_task() -> None:
    """The seed's three checks of the task set, formatter and reward, without loading a model."""
    item = train_dataset[0]
    assert item["prompt"] in brief_formatter(item)
    assert reward_func(["Hi"], ["Hello"], batch_items=[item]) == [1.0]
    assert reward_func([""], ["Hello"], batch_items=[item]) == [0.0]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1, help="passes over the 8 training tasks")
    parser.add_argument("--num-generations", type=int, default=8, help="joint samples per task")
    parser.add_argument(
        "--max-new-tokens", type=int, default=24, help="answer length limit per agent, tokens"
    )
    parser.add_argument("--lr", type=float, default=5e-4, help="learning rate of both agents")
    parser.add_argument("--eval-interval", type=int, default=4, help="training tasks between evaluations")
    parser.add_argument("--trainer", choices=sorted(TRAINERS), default="magrpo", help="multi-agent trainer")
    parser.add_argument(
        "--critic-lr", type=float, default=1e-3, help="iac / maac: learning rate of the critics"
    )
    parser.add_argument("--lam", type=float, default=0.95, help="iac / maac: GAE lambda")
    parser.add_argument("--shared-policy", action="store_true", help="both agents are one model")
    parser.add_argument("--seed", type=int, default=1, help="seeds sampling and the engines' initialisation")
    parser.add_argument("--output-dir", default="outputs/multi_agent_length_ratio", help="run files")
    parser.add_argument("--wandb-project", default=None, help="log to W&B under this project (else off)")
    opts = parser.parse_args(argv)
    check_task()
    trainer_cls, config_cls = TRAINERS[opts.trainer]
    critic = {} if opts.trainer == "magrpo" else {"critic_learning_rate": opts.critic_lr}
    config = config_cls(
        num_agents=2,
        num_turns=1,
        num_train_epochs=opts.epochs,
        num_generations=opts.num_generations,
        max_new_tokens=opts.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=None,
        agent_learning_rate=opts.lr,
        eval_interval=opts.eval_interval,
        eval_num_samples=len(eval_dataset),
        eval_batch_size=1,
        logging_steps=opts.num_generations,
        rollout_buffer_size=1,  # an update after every task (CoMLRL's default buffers 2, IAC/MAAC 8)
        shared_policy=opts.shared_policy,
        output_dir=opts.output_dir,
        seed=opts.seed,
        # GAE's lambda of iac / maac (magrpo has no critic): a verl_lite config key, applied to every agent
        overrides=[] if opts.trainer == "magrpo" else [f"algorithm.lam={opts.lam}"],
        **critic,
    )
    wandb_config = None
    if opts.wandb_project:
        wandb_config = {
            "project": opts.wandb_project,
            "name": "length-ratio-magrpo",
            "tags": ["length-ratio", "magrpo"],
            "config_sections": {
                "dataset": {"name": "length-ratio", "split_seed": 42},
                "output": {"verbose": True},
            },
        }
    custom = (
        {"eval_logger": eval_logger, "eval_aggregator": eval_aggregator}
        if opts.trainer == "magrpo"
        else {"metrics_callback": metrics_callback}
    )
    with trainer_cls(
        agent_model=None,  # the embedded tiny model
        num_agents=2,
        formatters=formatters,
        reward_func=reward_func,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        args=config,
        wandb_config=wandb_config,
        **custom,
    ) as trainer:
        history = trainer.train()
        metrics = trainer.evaluate(num_eval_samples=len(eval_dataset))
    Path(opts.output_dir, "eval-metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    rewards = [h["turn_1/reward_mean"] for h in history]
    evals = [e["eval/turn_1/reward_mean"] for e in trainer.eval_history]
    print(
        f"{opts.trainer} joint reward: training, mean of the first 3 tasks {sum(rewards[:3]) / 3:.3f}, of the "
        f"last 3 {sum(rewards[-3:]) / 3:.3f}; evaluation, first {evals[0]:.3f}, last {evals[-1]:.3f}"
    )
    print(json.dumps(metrics, indent=2))
    return {"history": history, "eval": metrics, "eval_history": trainer.eval_history}


if __name__ == "__main__":
    main()
