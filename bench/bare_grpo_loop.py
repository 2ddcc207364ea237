"""Bare single-process GRPO on the embedded tiny model, with no framework: checks the task design.

One step: sample ``n`` responses per prompt with HF ``generate`` -> rewards from ``compute_score``
-> group-normalized advantages -> old log-probs -> PPO-clip loss (token-mean) -> backward -> AdamW.
Prints val greedy accuracy before, during and after, and seconds per step. The demo's claim rests
on this: GRPO must raise the SFT model's val greedy accuracy by >= 15 points in ~5 CPU minutes.

    .venv/bin/python bench/bare_grpo_loop.py --max_steps 100 --time_budget_s 300
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import pandas as pd
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl_lite.data.scoring import compute_score
from verl_lite.data.task_eval import encode_prompts, evaluate_accuracy

ASSETS = Path(__file__).resolve().parents[1] / "verl_lite" / "assets"


def parse_args() -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model_dir", default=str(ASSETS / "tiny_model"))
    p.add_argument("--data_dir", default=str(ASSETS / "synthetic"))
    p.add_argument("--prompts_per_step", type=int, default=16)
    p.add_argument("--n", type=int, default=8, help="samples per prompt (group size)")
    p.add_argument("--max_new_tokens", type=int, default=40)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--clip_ratio", type=float, default=0.2)
    p.add_argument("--max_steps", type=int, default=100)
    p.add_argument("--time_budget_s", type=float, default=300.0, help="stop after this much training time")
    p.add_argument("--eval_every", type=int, default=20, help="steps between val evaluations")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


@torch.no_grad()
def rollout(model, tokenizer, rows: list[dict], n: int, max_new_tokens: int) -> dict[str, torch.Tensor]:
    """Sample ``n`` responses per prompt (temperature 1) and score them.

    Returns:
        ``input_ids``, ``attention_mask`` (batch * n, prompt_len + response_len), ``response_mask``
        (batch * n, response_len: tokens up to and including the first eos), ``rewards`` (batch * n,).
    """
    prompts = encode_prompts(tokenizer, [list(row["prompt"]) for row in rows])
    out = model.generate(
        **prompts,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=max_new_tokens,
        num_return_sequences=n,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    prompt_len = prompts["input_ids"].shape[1]
    responses = out[:, prompt_len:]
    is_eos = (responses == tokenizer.eos_token_id).int()
    # a position is part of the response until (and including) the first eos
    response_mask = (is_eos.cumsum(-1) - is_eos) == 0
    texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
    truths = [row["reward_model"]["ground_truth"] for row in rows for _ in range(n)]
    rewards = torch.tensor([compute_score(t, g) for t, g in zip(texts, truths)])
    prompt_mask = prompts["attention_mask"].repeat_interleave(n, dim=0)
    return {
        "input_ids": out,
        "attention_mask": torch.cat([prompt_mask, response_mask.long()], dim=1),
        "response_mask": response_mask.float(),
        "rewards": rewards,
    }


def group_advantages(rewards: torch.Tensor, n: int, eps: float = 1e-6) -> torch.Tensor:
    """GRPO: (reward - group mean) / (group std + eps); (batch * n,) -> (batch * n,)."""
    groups = rewards.view(-1, n)
    return ((groups - groups.mean(-1, keepdim=True)) / (groups.std(-1, keepdim=True) + eps)).view(-1)


def response_log_probs(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Log-probabilities of the response tokens, (batch, response_len)."""
    mask = batch["attention_mask"]
    # left padding: positions must count real tokens, as generate() did
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=batch["input_ids"], attention_mask=mask, position_ids=position_ids).logits
    response_len = batch["response_mask"].shape[1]
    logits = logits[:, -response_len - 1 : -1].float()  # (batch, response_len, vocab)
    targets = batch["input_ids"][:, -response_len:]
    return torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def ppo_clip_loss(log_prob, old_log_prob, advantages, response_mask, clip_ratio: float) -> torch.Tensor:
    """PPO clipped surrogate, averaged over all valid response tokens (token-mean)."""
    ratio = torch.exp(log_prob - old_log_prob)
    adv = advantages.unsqueeze(-1)
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_ratio, 1 + clip_ratio) * adv)
    return -(surrogate * response_mask).sum() / response_mask.sum().clamp(min=1)


def main() -> None:
    """Run GRPO until the step or time budget is spent; report accuracy before/after and s/step."""
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir)
    train_rows = pd.read_parquet(Path(args.data_dir) / "train.parquet").to_dict("records")
    val_rows = pd.read_parquet(Path(args.data_dir) / "val.parquet").to_dict("records")
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)

    def evaluate(step: int) -> float:
        acc = evaluate_accuracy(model, tokenizer, val_rows, args.max_new_tokens)
        print(f"step {step:4d}  val greedy accuracy {acc:.3f}", flush=True)
        return acc

    before = after = evaluate(0)
    train_time, cpu_time, step = 0.0, 0.0, 0
    while step < args.max_steps and train_time < args.time_budget_s:
        start, cpu_start = time.perf_counter(), time.process_time()
        model.eval()
        batch = rollout(
            model, tokenizer, rng.sample(train_rows, args.prompts_per_step), args.n, args.max_new_tokens
        )
        advantages = group_advantages(batch["rewards"], args.n)
        with torch.no_grad():
            old_log_prob = response_log_probs(model, batch)
        model.train()
        log_prob = response_log_probs(model, batch)
        loss = ppo_clip_loss(log_prob, old_log_prob, advantages, batch["response_mask"], args.clip_ratio)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        train_time += time.perf_counter() - start
        cpu_time += time.process_time() - cpu_start
        step += 1
        if step % 5 == 0:
            print(
                f"step {step:4d}  reward {batch['rewards'].mean():.3f}  {train_time / step:.2f} s/step",
                flush=True,
            )
        if step % args.eval_every == 0:
            after = evaluate(step)
    if step % args.eval_every:
        after = evaluate(step)
    print(
        f"val greedy accuracy {before:.3f} -> {after:.3f} ({100 * (after - before):+.1f} points) in {step} steps, "
        f"{train_time:.0f} s of training ({cpu_time:.0f} CPU s), {train_time / max(step, 1):.2f} s/step"
    )


if __name__ == "__main__":
    main()
