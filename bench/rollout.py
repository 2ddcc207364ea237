"""Generated tokens per second of the ``hf`` and ``vllm`` rollout backends on the same model and prompts.

A random Qwen2 (head_dim 32) is generated at two sizes; both backends sample the same prompts with
the same settings and the table prints tokens/s and the vllm/hf ratio (median of 3 after warm-up).
Run: ``python bench/rollout.py`` (vLLM rows are skipped when vLLM is not installed).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

import torch
from refresh_docs import write_fragment
from transformers import Qwen2Config, Qwen2ForCausalLM

from verl_lite.workers.config import RolloutConfig, SamplingConfig

SIZES = {
    "6M": dict(hidden_size=256, intermediate_size=704, num_hidden_layers=4, num_attention_heads=8),
    "31M": dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=8, num_attention_heads=16),
}
PROMPTS, PROMPT_LEN, NEW_TOKENS, N = 32, 16, 64, 4
RUNS = 3


def build_model(path: str, size: dict) -> None:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=512,
        num_key_value_heads=size["num_attention_heads"] // 2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        eos_token_id=511,
        **size,
    )
    Qwen2ForCausalLM(config).save_pretrained(path)


def tokens_per_second(backend, prompts) -> float:
    sampling = SamplingConfig(n=N, temperature=1.0)
    backend.generate(prompts[:4], sampling, 8)  # warm-up
    rates = []
    for _ in range(RUNS):
        start = time.perf_counter()
        generations = backend.generate(prompts, sampling, NEW_TOKENS)
        elapsed = time.perf_counter() - start
        rates.append(sum(g.response_ids.numel() for g in generations) / elapsed)
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", help="also write the table to this file (see bench/refresh_docs.py)")
    args = parser.parse_args()
    from verl_lite.workers.rollout import HFRollout

    torch.set_num_threads(2)
    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 500, (PROMPT_LEN,), generator=generator) for _ in range(PROMPTS)]
    config = RolloutConfig(prompt_length=PROMPT_LEN, response_length=NEW_TOKENS, micro_batch_size=PROMPTS)
    has_vllm = importlib.util.find_spec("vllm") is not None
    rows = []
    for name, size in SIZES.items():
        with tempfile.TemporaryDirectory() as path:
            build_model(path, size)
            params = sum(p.numel() for p in Qwen2ForCausalLM.from_pretrained(path).parameters()) / 1e6
            hf = tokens_per_second(HFRollout(path, config, eos_token_id=511, pad_token_id=0), prompts)
            vllm = None
            if has_vllm:
                from verl_lite.workers.rollout import VLLMRollout

                backend = VLLMRollout(path, config, eos_token_id=511, pad_token_id=0)
                vllm = tokens_per_second(backend, prompts)
                del backend
            rows.append((name, params, hf, vllm))
    print(
        f"rollout throughput: {PROMPTS} prompts x n={N}, {NEW_TOKENS} new tokens, sampling T=1, median of {RUNS}"
    )
    print(f"{'model':>6} | {'params':>7} | {'hf tok/s':>9} | {'vllm tok/s':>10} | {'vllm/hf':>7}")
    print("-" * 52)
    for name, params, hf, vllm in rows:
        v = f"{vllm:10.0f}" if vllm else f"{'n/a':>10}"
        ratio = f"{vllm / hf:7.2f}" if vllm else f"{'n/a':>7}"
        print(f"{name:>6} | {params:6.1f}M | {hf:9.0f} | {v} | {ratio}")
    if args.markdown:
        write_fragment(
            args.markdown,
            ["model", "hf tok/s", "vllm tok/s", "vllm/hf"],
            [
                [
                    f"{params:.1f}M params",
                    f"{hf:.0f}",
                    f"{vllm:.0f}" if vllm else "n/a",
                    f"{vllm / hf:.2f}" if vllm else "n/a",
                ]
                for _, params, hf, vllm in rows
            ],
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
