"""The vllm rollout server (AsyncLLM) on the embedded tiny model; one engine serves the whole module."""

import asyncio

import psutil
import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.workers.server_helpers import (
    EOS,
    GREEDY,
    PAD,
    PROMPTS,
    SAMPLED,
    TINY_MODEL,
    eos_never_sampled,
    generate_all,
    perturbed_state,
    teacher_forced_log_probs,
)
from verl_lite.workers.config import RolloutConfig
from verl_lite.workers.rollout import ServerHost, get_rollout

# Needs vLLM; tests/conftest.py fails it when vLLM is part of the set-up but broken.
pytestmark = pytest.mark.vllm

# vLLM's CPU kernels (oneDNN linears, its own attention) against one fp32 HF forward: the same math in
# another order and blocking, so float32 rounding only (3e-5 seen over 218 sampled tokens); stale or wrong
# weights are off by more than 1e-2.
LOG_PROB_ATOL = 2e-4


def _engine_processes() -> list[psutil.Process]:
    """Live vLLM processes under this one (vLLM names them VLLM::EngineCore, VLLM::Worker)."""
    alive = []
    for process in psutil.Process().children(recursive=True):
        try:
            if process.name().startswith("VLLM") and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.fixture(scope="module")
def model():
    return AutoModelForCausalLM.from_pretrained(TINY_MODEL, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def host():
    config = RolloutConfig(name="vllm", max_model_len=512, max_num_seqs=64)
    host = ServerHost(lambda: get_rollout("vllm")(TINY_MODEL, config, EOS, PAD))
    yield host
    host.shutdown()


def test_vllm_sampled_tokens_and_log_probs_match_a_teacher_forced_forward(host, model):
    outputs = host.call(generate_all(host.server, PROMPTS * 4, SAMPLED, max_tokens=8))
    assert {o.finish_reason for o in outputs} <= {"stop", "length"} and host.server.load == 0
    for prompt, out in zip(PROMPTS * 4, outputs):
        assert len(out.log_probs) == len(out.token_ids) > 0 and out.weight_version == -1
        if out.finish_reason == "stop":
            assert out.token_ids.index(EOS) == len(out.token_ids) - 1  # ends on its only EOS
        else:
            assert EOS not in out.token_ids and len(out.token_ids) == 8
        expected = teacher_forced_log_probs(model, prompt, out.token_ids, SAMPLED.temperature)
        assert torch.allclose(torch.tensor(out.log_probs), expected, atol=LOG_PROB_ATOL)


def test_vllm_greedy_output_equals_a_batched_hf_generate(host, model):
    outputs = host.call(generate_all(host.server, PROMPTS, GREEDY, max_tokens=10))
    width = max(map(len, PROMPTS))
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in PROMPTS])
    raw = model.generate(
        input_ids=ids, attention_mask=(ids != PAD).long(), max_new_tokens=10, do_sample=False,
        eos_token_id=EOS, pad_token_id=PAD,
    )[:, width:]  # fmt: skip
    for row, out in zip(raw.tolist(), outputs):
        assert out.token_ids == (row[: row.index(EOS) + 1] if EOS in row else row)


def test_vllm_abort_all_returns_tokens_so_far_and_holds_new_requests_until_resume(host):
    server = host.server

    async def scenario():
        with eos_never_sampled(server):
            long = [
                asyncio.create_task(server.generate(f"l{i}", p, GREEDY, 256)) for i, p in enumerate(PROMPTS)
            ]
            # decoded in the same engine steps as the long ones: when it is done, they have tokens
            await server.generate("short", PROMPTS[0], GREEDY, 3)
            await server.abort_all()
            assert all(task.done() for task in long)
            held = asyncio.create_task(server.generate("held", PROMPTS[0], GREEDY, 4))
            await asyncio.sleep(0.1)
            assert not held.done() and server.load == 1
            await server.resume()
            return [task.result() for task in long], await held

    aborted, after = host.call(scenario())
    for out in aborted:
        assert out.finish_reason == "abort" and 0 < len(out.token_ids) < 256
        assert len(out.log_probs) == len(out.token_ids)
    assert after.finish_reason in ("stop", "length") and len(after.token_ids) > 0


def test_vllm_load_weights_waits_for_running_requests_then_serves_the_new_version(host, model):
    server = host.server
    new_model = AutoModelForCausalLM.from_pretrained(TINY_MODEL, dtype=torch.float32).eval()
    new_model.load_state_dict(perturbed_state(model))

    async def scenario():
        with eos_never_sampled(server):
            running = asyncio.create_task(server.generate("old", PROMPTS[2], GREEDY, 64))
            await server.generate("started", PROMPTS[1], GREEDY, 2)  # the engine is decoding "old"
            await server.load_weights(new_model.state_dict().items(), version=4)
            assert running.done()  # the load waited for it
            return running.result(), await server.generate("new", PROMPTS[2], GREEDY, 64)

    try:
        old, new = host.call(scenario())
        assert server.weight_version == 4 and (old.weight_version, new.weight_version) == (-1, 4)
        assert old.token_ids != new.token_ids
        for out, reference in ((old, model), (new, new_model)):
            expected = teacher_forced_log_probs(reference, PROMPTS[2], out.token_ids, 1.0)
            assert torch.allclose(torch.tensor(out.log_probs), expected, atol=LOG_PROB_ATOL)
    finally:
        host.call(server.load_weights(model.state_dict().items(), version=-1))


def test_vllm_sleep_mode_is_off_where_vllm_cannot_sleep(host):
    if not torch.cuda.is_available():
        assert host.server.supports_sleep is False  # vLLM's sleep mode is CUDA-only


def test_vllm_shutdown_ends_the_engine_core_process(host):
    # Last test of the module: it shuts the shared engine down (the fixture's shutdown is then a no-op).
    assert _engine_processes(), "the engine core runs in a child process"
    host.shutdown()
    psutil.wait_procs(_engine_processes(), timeout=30)
    assert _engine_processes() == []
