"""Bare single-process GRPO on the embedded tiny model, with no framework: checks the task design.

One step: sample ``n`` responses per prompt with HF ``generate`` -> rewards from ``compute_score``
-> group-normalized advantages -> old log-probs -> PPO-clip loss (token-mean) -> backward -> AdamW.
Prints val greedy accuracy before, during and after, and seconds per step. The demo's claim rests
on this: GRPO must raise the SFT model's val greedy accuracy by >= 15 points in ~5 CPU minutes.
``run_bare_grpo`` is the same loop as a function: bench/e2e_vs_trl.py runs it as the floor that
frameworks are measured against.

    .venv/bin/python bench/bare_grpo_loop.py --max_steps 100 --time_budget_s 300
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass, field
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
    p.add_argument("--markdown", help="also write the result as a markdown table to this file")
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


@dataclass
class BareGRPOResult:
    """What one bare run measured: seconds of each step and val greedy accuracy at each evaluation."""

    step_seconds: list[float] = field(default_factory=list)
    accuracy: dict[int, float] = field(default_factory=dict)
    cpu_seconds: float = 0.0


def grpo_step(
    model, tokenizer, optimizer, rows: list[dict], n: int, max_new_tokens: int, clip_ratio: float
) -> float:
    """One GRPO step: rollout -> advantages -> old log-probs -> PPO-clip loss -> backward -> AdamW.

    Returns:
        The mean reward of the step's samples.
    """
    model.eval()
    batch = rollout(model, tokenizer, rows, n, max_new_tokens)
    advantages = group_advantages(batch["rewards"], n)
    with torch.no_grad():
        old_log_prob = response_log_probs(model, batch)
    model.train()
    log_prob = response_log_probs(model, batch)
    loss = ppo_clip_loss(log_prob, old_log_prob, advantages, batch["response_mask"], clip_ratio)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return batch["rewards"].mean().item()


def run_bare_grpo(
    model_dir: str,
    data_dir: str,
    prompts_per_step: int,
    n: int,
    max_new_tokens: int,
    lr: float,
    max_steps: int,
    clip_ratio: float = 0.2,
    time_budget_s: float = float("inf"),
    eval_every: int = 0,
    evaluate_val: bool = True,
    seed: int = 0,
    log=print,
) -> BareGRPOResult:
    """Train with bare GRPO until ``max_steps`` or the time budget; evaluate val greedy accuracy.

    Evaluation (not counted in step time) runs before training, every ``eval_every`` steps (0: never)
    and after the last step; ``evaluate_val=False`` skips all of it.
    """
    torch.manual_seed(seed)
    rng = random.Random(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    train_rows = pd.read_parquet(Path(data_dir) / "train.parquet").to_dict("records")
    val_rows = pd.read_parquet(Path(data_dir) / "val.parquet").to_dict("records")
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    result = BareGRPOResult()

    def evaluate(step: int) -> None:
        if evaluate_val:
            result.accuracy[step] = evaluate_accuracy(model, tokenizer, val_rows, max_new_tokens)
            log(f"step {step:4d}  val greedy accuracy {result.accuracy[step]:.3f}")

    evaluate(0)
    step = 0
    while step < max_steps and sum(result.step_seconds) < time_budget_s:
        start, cpu_start = time.perf_counter(), time.process_time()
        reward = grpo_step(
            model,
            tokenizer,
            optimizer,
            rng.sample(train_rows, prompts_per_step),
            n,
            max_new_tokens,
            clip_ratio,
        )
        result.step_seconds.append(time.perf_counter() - start)
        result.cpu_seconds += time.process_time() - cpu_start
        step += 1
        if step % 5 == 0:
            log(f"step {step:4d}  reward {reward:.3f}  {sum(result.step_seconds) / step:.2f} s/step")
        if eval_every and step % eval_every == 0:
            evaluate(step)
    if step not in result.accuracy:
        evaluate(step)
    return result


def main() -> None:
    """Run GRPO until the step or time budget is spent; report accuracy before/after and s/step."""
    args = parse_args()
    torch.set_num_threads(args.threads)
    result = run_bare_grpo(
        args.model_dir,
        args.data_dir,
        args.prompts_per_step,
        args.n,
        args.max_new_tokens,
        args.lr,
        args.max_steps,
        clip_ratio=args.clip_ratio,
        time_budget_s=args.time_budget_s,
        eval_every=args.eval_every,
        seed=args.seed,
        log=lambda line: print(line, flush=True),
    )
    steps, train_time = len(result.step_seconds), sum(result.step_seconds)
    before, after = result.accuracy[0], result.accuracy[steps]
    summary = (
        f"val greedy accuracy {before:.3f} -> {after:.3f} ({100 * (after - before):+.1f} points) in {steps} steps, "
        f"{train_time:.0f} s of training ({result.cpu_seconds:.0f} CPU s), {train_time / max(steps, 1):.2f} s/step"
    )
    print(summary)
    if args.markdown:
        Path(args.markdown).write_text(
            "| steps | val greedy accuracy before | after | change | s/step |\n|---|---|---|---|---|\n"
            f"| {steps} | {before:.3f} | {after:.3f} | {100 * (after - before):+.1f} points "
            f"| {train_time / max(steps, 1):.2f} |\n"
        )


if __name__ == "__main__":
    main()
