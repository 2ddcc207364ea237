"""Generation and training of one process on one thread, on two threads, and through a ``ServerHost``.

torch's CPU kernels run on OpenMP (libgomp), which keeps a team of threads for every thread that calls
into it. When a process holds more OpenMP threads than the machine has cores, libgomp throttles the
spin-wait of every team between parallel regions to almost nothing, and each small op then pays a
futex sleep and wake-up. The hybrid placement generates and trains in one process, so where the
rollout server runs its batches matters:

* ``one thread``: ``generate`` and the training step on the same thread (the floor);
* ``two threads``: ``generate`` on a second thread, as a server that decodes in ``asyncio.to_thread``;
* ``ServerHost``: the ``hf`` rollout server in a ``ServerHost``, its requests sent with ``host.call`` from
  the thread that trains, as ``RolloutWorker.generate_sequences`` does in the hybrid placement.

Each mode runs in a fresh process (teams outlive the threads' work), the modes alternate over
``--rounds``, and the table gives the median seconds of ``generate`` (``--batch`` sequences of
``--new-tokens``) and of one AdamW training step on the generated sequences, and the step's ratio to
``one thread``.

    .venv/bin/python bench/omp_threads.py --threads 2
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODES = ("one thread", "two threads", "ServerHost")
EOS, PAD = 1, 0


def run_mode(mode: str, model_dir: str, batch: int, new_tokens: int, steps: int) -> dict[str, list[float]]:
    """Seconds of generation and of training per step, in this process, the way ``mode`` says."""
    import torch
    from transformers import AutoModelForCausalLM

    from verl_lite.workers.config import RolloutConfig, SamplingConfig
    from verl_lite.workers.rollout import ServerHost, get_rollout
    from verl_lite.workers.rollout.hf import generate_batch, load_hf_model

    sampling = SamplingConfig(temperature=1.0)
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(2, 400, (16,), generator=generator).tolist() for _ in range(batch)]
    policy = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-5, fused=True)

    if mode == "ServerHost":
        config = RolloutConfig(response_length=new_tokens)
        host = ServerHost(lambda: get_rollout("hf")(model_dir, config, EOS, PAD))

        def generate() -> torch.Tensor:
            async def all_requests():
                return await asyncio.gather(
                    *[
                        host.server.generate(f"r{time.monotonic_ns()}-{i}", p, sampling, new_tokens)
                        for i, p in enumerate(prompts)
                    ]
                )

            outs = host.call(all_requests())
            return torch.tensor(
                [p + o.token_ids + [PAD] * (new_tokens - len(o.token_ids)) for p, o in zip(prompts, outs)]
            )

    else:
        model = load_hf_model(model_dir)
        other = concurrent.futures.ThreadPoolExecutor(max_workers=1)

        def decode() -> torch.Tensor:
            tokens, _ = generate_batch(
                model, prompts, sampling, new_tokens, [EOS], PAD, seeds=list(range(batch))
            )
            return torch.cat([torch.tensor(prompts), tokens], dim=1)

        def generate() -> torch.Tensor:
            return decode() if mode == "one thread" else other.submit(decode).result()

    def train(sequences: torch.Tensor) -> None:
        logits = policy(input_ids=sequences).logits
        loss = logits.log_softmax(-1).gather(-1, sequences.unsqueeze(-1)).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    times: dict[str, list[float]] = {"gen": [], "train": []}
    for step in range(steps + 1):  # the first is a warm-up
        start = time.perf_counter()
        sequences = generate()
        generated = time.perf_counter()
        train(sequences)
        if step:
            times["gen"].append(generated - start)
            times["train"].append(time.perf_counter() - generated)
    if mode == "ServerHost":
        host.shutdown()
    return times


def main() -> None:
    from e2e_vs_trl import MODEL_30M, build_random_model
    from refresh_docs import write_fragment

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of every mode's process")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--steps", type=int, default=5, help="measured steps per round, after one warm-up")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--markdown", help="also write the table to this file (see bench/refresh_docs.py)")
    parser.add_argument("--_mode", help=argparse.SUPPRESS)
    parser.add_argument("--_model_dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._mode:
        times = run_mode(args._mode, args._model_dir, args.batch, args.new_tokens, args.steps)
        print("RESULT " + json.dumps(times), flush=True)
        return

    results: dict[str, dict[str, list[float]]] = {m: {"gen": [], "train": []} for m in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"
        build_random_model(model_dir, MODEL_30M)
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1"}
        for round_ in range(args.rounds):
            for mode in MODES if round_ % 2 == 0 else MODES[::-1]:
                print(f"== round {round_ + 1}/{args.rounds}: {mode}", flush=True)
                out = subprocess.run(
                    [sys.executable, __file__, "--_mode", mode, "--_model_dir", str(model_dir)]
                    + [f"--batch={args.batch}", f"--new-tokens={args.new_tokens}", f"--steps={args.steps}"],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                times = json.loads(out.stdout.split("RESULT ", 1)[1])
                for phase in ("gen", "train"):
                    results[mode][phase] += times[phase]

    floor = statistics.median(a + b for a, b in zip(results[MODES[0]]["gen"], results[MODES[0]]["train"]))
    rows = []
    for mode in MODES:
        gen, train = results[mode]["gen"], results[mode]["train"]
        step = statistics.median(a + b for a, b in zip(gen, train))
        rows.append(
            [
                mode,
                f"{statistics.median(gen):.3f}",
                f"{statistics.median(train):.3f}",
                f"{step:.3f}",
                f"{step / floor:.2f}",
            ]
        )
    title = (
        f"random Qwen2 (30m), {args.batch} x {args.new_tokens} new tokens, {args.threads} thread(s), "
        f"{args.rounds} round(s) x {args.steps} steps, modes alternating; medians"
    )
    header = ["mode", "generate s", "train step s", "step s", "× one thread"]
    print(title)
    print(" | ".join(f"{h:>13}" for h in header))
    for row in rows:
        print(" | ".join(f"{c:>13}" for c in row))
    if args.markdown:
        write_fragment(args.markdown, header, rows, note=title)


if __name__ == "__main__":
    main()
