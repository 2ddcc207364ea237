"""Generated tokens per second of the rollout servers against one batched call to the raw engine.

The same requests (``PROMPTS`` prompts x ``SAMPLES`` samples, ``NEW_TOKENS`` new tokens, T=1) go either
as one batch straight to the engine (HF ``model.generate`` on the left-padded batch; vLLM
``LLM.generate``) or as that many concurrent ``generate`` requests to the ``hf`` / ``vllm`` server
through a ``ServerHost``. Models: random-init Qwen2s of ~3 M and ~30 M parameters with the embedded
tokenizer (the ~30 M one is ``bench/e2e_vs_trl.py --model 30m``'s). Raw and server runs alternate;
the table gives the best of ``RUNS`` after a warm-up, and the server/raw ratio (1.0 = no overhead).

    .venv/bin/python bench/rollout.py [--markdown outputs/bench/rollout.md]

vLLM rows are skipped when vLLM is not installed.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

import torch
from e2e_vs_trl import MODEL_30M, build_random_model
from refresh_docs import write_fragment

from verl_lite.workers.config import RolloutConfig, SamplingConfig
from verl_lite.workers.rollout import ServerHost, get_rollout

SIZES = {
    "3m": dict(hidden_size=256, intermediate_size=704, num_hidden_layers=4, num_attention_heads=8),
    "30m": MODEL_30M,
}
PROMPTS, SAMPLES, PROMPT_LEN, NEW_TOKENS = 32, 4, 16, 64
RUNS = 7
EOS, PAD = 1, 0
SAMPLING = SamplingConfig(n=1, temperature=1.0)


def make_requests() -> list[list[int]]:
    """``PROMPTS`` x ``SAMPLES`` prompts of random ids (no EOS or pad), each prompt ``SAMPLES`` times."""
    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(2, 400, (PROMPT_LEN,), generator=generator).tolist() for _ in range(PROMPTS)]
    return [p for p in prompts for _ in range(SAMPLES)]


def serve_all(host: ServerHost, requests: list[list[int]], max_tokens: int) -> int:
    """Send every request to the hosted server at once; the number of tokens generated."""

    async def run():
        outs = await asyncio.gather(
            *[
                host.server.generate(f"b{time.monotonic_ns()}-{i}", p, SAMPLING, max_tokens)
                for i, p in enumerate(requests)
            ]
        )
        return sum(len(o.token_ids) for o in outs)

    return host.call(run())


def raw_hf(model, requests: list[list[int]], max_tokens: int) -> int:
    """One left-padded batched ``model.generate`` over every request; the number of tokens generated."""
    from verl_lite.workers.rollout.hf import generate_batch, response_length

    tokens, _ = generate_batch(model, requests, SAMPLING, max_tokens, [EOS], PAD)
    return sum(response_length(row, [EOS]) or tokens.shape[1] for row in tokens)


def raw_vllm(llm, requests: list[list[int]], max_tokens: int) -> int:
    """One ``LLM.generate`` over every request; the number of tokens generated."""
    from vllm import TokensPrompt

    from verl_lite.workers.rollout.vllm_rollout import sampling_params

    params = sampling_params(SAMPLING, max_tokens, [EOS])
    outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in requests], params, use_tqdm=False)
    return sum(len(o.outputs[0].token_ids) for o in outputs)


def tokens_per_second(raw, served, requests) -> tuple[float, float]:
    """Best tokens/s of ``raw`` and of ``served`` (callables of (requests, max_tokens)) over ``RUNS`` each.

    The two alternate, in swapped order every round, so drifting load from other jobs hits both alike;
    the best run is the one least slowed by them.
    """
    raw(requests[:8], 8), served(requests[:8], 8)  # warm-up
    rates = {"raw": [], "server": []}
    for round_ in range(RUNS):
        order = (("raw", raw), ("server", served))
        for name, fn in order if round_ % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            tokens = fn(requests, NEW_TOKENS)
            rates[name].append(tokens / (time.perf_counter() - start))
    return max(rates["raw"]), max(rates["server"])


def bench_hf(path: str, config: RolloutConfig, requests) -> tuple[float, float]:
    """(raw, server) tokens/s of Hugging Face ``generate``."""
    from verl_lite.workers.rollout.hf import load_hf_model

    model = load_hf_model(path)
    host = ServerHost(lambda: get_rollout("hf")(path, config, EOS, PAD))
    try:
        return tokens_per_second(
            lambda r, m: raw_hf(model, r, m), lambda r, m: serve_all(host, r, m), requests
        )
    finally:
        host.shutdown()


def bench_vllm(path: str, config: RolloutConfig, requests) -> tuple[float, float]:
    """(raw, server) tokens/s of vLLM: the sync ``LLM`` engine and the ``AsyncLLM`` server, side by side."""
    from vllm import LLM

    from verl_lite.workers.rollout.vllm_rollout import engine_kwargs

    llm = LLM(**engine_kwargs(path, config)[1])
    host = ServerHost(lambda: get_rollout("vllm")(path, config, EOS, PAD))
    try:
        return tokens_per_second(
            lambda r, m: raw_vllm(llm, r, m), lambda r, m: serve_all(host, r, m), requests
        )
    finally:
        host.shutdown()
        llm.llm_engine.engine_core.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", help="also write the table to this file (see bench/refresh_docs.py)")
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=list(SIZES))
    args = parser.parse_args()
    torch.set_num_threads(2)
    requests = make_requests()
    config = RolloutConfig(prompt_length=PROMPT_LEN, response_length=NEW_TOKENS)
    backends = {"hf": bench_hf}
    if importlib.util.find_spec("vllm") is not None:
        backends["vllm"] = bench_vllm
    rows = []
    for size in args.sizes:
        with tempfile.TemporaryDirectory() as work:
            path = Path(work) / f"model_{size}"
            params = build_random_model(path, SIZES[size])
            for backend, bench in backends.items():
                raw, served = bench(str(path), config, requests)
                rows.append((f"{params:.1f}M", backend, raw, served))
                print(f"{size} {backend}: raw {raw:.0f} tok/s, server {served:.0f} tok/s", flush=True)
    title = (
        f"rollout servers vs one raw batch: {PROMPTS} prompts x {SAMPLES} samples = {PROMPTS * SAMPLES} "
        f"requests, {NEW_TOKENS} new tokens, T=1, best of {RUNS}"
    )
    print(title)
    print(f"{'params':>7} | {'backend':>7} | {'raw tok/s':>9} | {'server tok/s':>12} | {'server/raw':>10}")
    print("-" * 60)
    for params, backend, raw, served in rows:
        print(f"{params:>7} | {backend:>7} | {raw:9.0f} | {served:12.0f} | {served / raw:10.2f}")
    if args.markdown:
        write_fragment(
            args.markdown,
            ["model", "backend", "raw batch tok/s", "server tok/s", "server/raw"],
            [
                [f"{params} params", backend, f"{raw:.0f}", f"{served:.0f}", f"{served / raw:.2f}"]
                for params, backend, raw, served in rows
            ],
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
