"""The hf rollout server on the embedded tiny model: dynamic batching, log-probs, abort/resume, weight loads."""

import asyncio
import threading

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
from verl_lite.workers.config import RolloutConfig, SamplingConfig
from verl_lite.workers.rollout import HFServer, ServerHost, get_rollout

# fp32 on CPU: the server's cached, left-padded batch decode and one unpadded forward are the same math in
# another summation order, so they differ by float32 rounding only: ~100 ulps (1.2e-7) of logits of size ~10
# after 4 layers, i.e. up to ~1e-4 (2e-5 seen over 768 sampled tokens). A token scored after the wrong
# prompt or with other weights is off by more than 1e-2.
LOG_PROB_ATOL = 1e-4


@pytest.fixture(scope="module")
def model():
    return AutoModelForCausalLM.from_pretrained(TINY_MODEL, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def host():
    host = ServerHost(lambda: get_rollout("hf")(TINY_MODEL, RolloutConfig(max_num_seqs=64), EOS, PAD))
    yield host
    host.shutdown()


def test_get_rollout_hf_is_the_server():
    assert get_rollout("hf") is HFServer


def test_concurrent_requests_with_equal_sampling_run_as_one_batched_generate(host):
    server = host.server
    before = server.num_batches
    outputs = host.call(generate_all(server, PROMPTS, SAMPLED, max_tokens=8))
    assert server.num_batches - before == 1 and len(outputs) == len(PROMPTS)

    # other budgets join the same batch (the later turns of multi-turn trajectories differ in budget):
    # 6 + 6 requests, 1 generate, each row stopped at its own budget
    async def two_budgets():
        return await asyncio.gather(
            generate_all(server, PROMPTS, SAMPLED, 8, "a"), generate_all(server, PROMPTS, SAMPLED, 5, "b")
        )

    long, short = host.call(two_budgets())
    assert server.num_batches - before == 2
    for output in short:
        assert len(output.token_ids) <= 5 and len(output.log_probs) == len(output.token_ids)
        assert output.finish_reason == ("stop" if output.token_ids[-1] == EOS else "length")
        if output.finish_reason == "length":
            assert len(output.token_ids) == 5
    # and a row decodes as it would with its budget alone (seeded by its request id)
    alone = [host.call(server.generate(f"b{i}", p, SAMPLED, 5)) for i, p in enumerate(PROMPTS)]
    assert [o.token_ids for o in alone] == [o.token_ids for o in short]

    # greedy rows that never meet EOS run exactly to their budgets, in one generate
    async def greedy_budgets():
        return await asyncio.gather(*[server.generate(f"g{b}", PROMPTS[0], GREEDY, b) for b in (3, 8, 5)])

    with eos_never_sampled(server):
        three, eight, five = host.call(greedy_budgets())
    assert server.num_batches - before == 2 + len(PROMPTS) + 1
    assert [len(o.token_ids) for o in (three, eight, five)] == [3, 8, 5]
    assert {o.finish_reason for o in (three, eight, five)} == {"length"}
    assert three.token_ids == eight.token_ids[:3] and five.token_ids == eight.token_ids[:5]
    assert server.load == 0


def test_max_num_seqs_caps_a_batch():
    server = HFServer(TINY_MODEL, RolloutConfig(max_num_seqs=4), EOS, PAD)
    outputs = asyncio.run(generate_all(server, PROMPTS, GREEDY, max_tokens=4))
    assert server.num_batches == 2 and server.num_batched_requests == 6  # 4 + 2
    assert all(0 < len(o.token_ids) <= 4 for o in outputs)
    server.shutdown()


def test_sampled_tokens_and_log_probs_match_a_teacher_forced_forward(host, model):
    torch.manual_seed(0)
    outputs = host.call(generate_all(host.server, PROMPTS * 4, SAMPLED, max_tokens=8))
    assert {o.finish_reason for o in outputs} <= {"stop", "length"}
    for prompt, out in zip(PROMPTS * 4, outputs):
        assert len(out.log_probs) == len(out.token_ids) > 0 and out.weight_version == -1
        if out.finish_reason == "stop":
            assert out.token_ids.index(EOS) == len(out.token_ids) - 1  # ends on its only EOS
        else:
            assert EOS not in out.token_ids and len(out.token_ids) == 8
        expected = teacher_forced_log_probs(model, prompt, out.token_ids, SAMPLED.temperature)
        assert torch.allclose(torch.tensor(out.log_probs), expected, atol=LOG_PROB_ATOL)


def test_greedy_output_equals_one_batched_model_generate(host, model):
    outputs = host.call(generate_all(host.server, PROMPTS, GREEDY, max_tokens=10))
    width = max(map(len, PROMPTS))
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in PROMPTS])
    raw = model.generate(
        input_ids=ids, attention_mask=(ids != PAD).long(), max_new_tokens=10, do_sample=False,
        eos_token_id=EOS, pad_token_id=PAD,
    )[:, width:]  # fmt: skip
    for row, out in zip(raw.tolist(), outputs):
        expected = row[: row.index(EOS) + 1] if EOS in row else row
        assert out.token_ids == expected


def test_abort_all_returns_tokens_so_far_and_holds_new_requests_until_resume(host):
    server = host.server

    async def scenario():
        with eos_never_sampled(server):
            long = [
                asyncio.create_task(server.generate(f"l{i}", p, GREEDY, 256)) for i, p in enumerate(PROMPTS)
            ]
            while server.num_decoding < len(PROMPTS):  # the batch is in model.generate
                await asyncio.sleep(0.001)
            await server.abort_all()
            assert all(task.done() for task in long)
            held = asyncio.create_task(server.generate("held", PROMPTS[0], GREEDY, 4))
            await asyncio.sleep(0.05)
            assert not held.done() and server.load == 1
            await server.resume()
            return [task.result() for task in long], await held

    aborted, after = host.call(scenario())
    for out in aborted:
        assert out.finish_reason == "abort" and 0 < len(out.token_ids) < 256
        assert len(out.log_probs) == len(out.token_ids)
    assert after.finish_reason in ("stop", "length") and len(after.token_ids) > 0


def test_load_weights_waits_for_the_running_batch_then_serves_the_new_version(host, model):
    server = host.server
    new_model = AutoModelForCausalLM.from_pretrained(TINY_MODEL, dtype=torch.float32).eval()
    new_model.load_state_dict(perturbed_state(model))

    async def scenario():
        with eos_never_sampled(server):
            running = asyncio.create_task(server.generate("old", PROMPTS[2], GREEDY, 64))
            while server.num_decoding == 0:
                await asyncio.sleep(0.001)
            await server.load_weights(new_model.state_dict().items(), version=3)
            assert running.done()  # the load waited for the batch
            return running.result(), await server.generate("new", PROMPTS[2], GREEDY, 64)

    try:
        old, new = host.call(scenario())
        assert server.weight_version == 3 and (old.weight_version, new.weight_version) == (-1, 3)
        assert old.token_ids != new.token_ids
        # each output is wholly from one set of weights: the load never ran inside a batch
        for out, reference in ((old, model), (new, new_model)):
            expected = teacher_forced_log_probs(reference, PROMPTS[2], out.token_ids, 1.0)
            assert torch.allclose(torch.tensor(out.log_probs), expected, atol=LOG_PROB_ATOL)
        ids = torch.tensor([PROMPTS[2]])
        assert torch.allclose(server.logits(ids, torch.ones_like(ids)), new_model(ids).logits, atol=1e-5)
    finally:
        host.call(server.load_weights(model.state_dict().items(), version=-1))


def test_load_weights_names_an_unknown_parameter(host):
    with pytest.raises(KeyError, match="no parameter 'not.a.weight'"):
        host.call(host.server.load_weights([("not.a.weight", torch.zeros(1))], version=1))
    assert host.server.weight_version == -1


def test_calls_from_several_threads_each_get_their_own_prompt_continuation(host):
    server = host.server
    expected = host.call(generate_all(server, PROMPTS, GREEDY, max_tokens=6))
    results = [None] * len(PROMPTS)

    def ask(i):
        results[i] = host.call(server.generate(f"t{i}", PROMPTS[i], GREEDY, 6))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.token_ids for r in results] == [e.token_ids for e in expected]


def test_server_host_shutdown_stops_its_thread_and_refuses_new_calls():
    host = ServerHost(HFServer(TINY_MODEL, RolloutConfig(), EOS, PAD))
    out = host.call(host.server.generate("x", PROMPTS[0], SamplingConfig(), 4))
    assert 0 < len(out.token_ids) <= 4
    host.shutdown()
    assert not host._thread.is_alive()
    with pytest.raises(RuntimeError, match="shut down"):
        host.call(host.server.generate("y", PROMPTS[0], SamplingConfig(), 4))
    host.shutdown()  # a second shutdown is a no-op


def test_a_sampled_request_depends_on_its_id_not_on_the_batch_it_joined(host):
    # Seeded per request: alone, or batched with other requests, or after other sampling, the same id
    # samples the same tokens; another id samples others (6 prompts x 8 tokens at T=0.7 never all agree).
    top = SamplingConfig(n=1, temperature=0.7, top_k=20, top_p=0.9)
    server = host.server
    together = host.call(generate_all(server, PROMPTS, top, 8, "s"))
    alone = [host.call(server.generate(f"s{i}", p, top, 8)) for i, p in enumerate(PROMPTS)]
    assert [o.token_ids for o in together] == [o.token_ids for o in alone]
    others = host.call(generate_all(server, PROMPTS, top, 8, "t"))
    assert [o.token_ids for o in others] != [o.token_ids for o in together]


def test_seeded_sampling_draws_from_the_temperature_softmax():
    # Gumbel-max: argmax(logits / T + G) is a sample of softmax(logits / T). 4000 draws of a 3-token
    # distribution: each frequency is within 4 standard deviations (sqrt(p(1-p)/4000) <= 0.008).
    from verl_lite.workers.rollout.hf import seeded_sampler

    logits = torch.tensor([[2.0, 1.0, 0.0]]).repeat(4000, 1)
    sampling = SamplingConfig(n=1, temperature=0.5)
    [sampler] = seeded_sampler(sampling, list(range(4000)))
    picks = sampler(None, logits).argmax(dim=-1)
    expected = torch.softmax(logits[0] / 0.5, dim=-1)
    observed = torch.bincount(picks, minlength=3).float() / 4000
    assert (observed - expected).abs().max() < 4 * 0.008


def test_a_batch_runs_on_the_thread_that_waits_in_call_else_on_the_hosts_own_thread(host):
    # The hybrid placement trains on the thread that calls the host; generating there as well keeps the
    # process's torch work on one OpenMP team (see WaitingThreadExecutor).
    forward_threads = []
    hook = host.server.model.register_forward_pre_hook(
        lambda *_: forward_threads.append(threading.get_ident())
    )
    try:
        host.call(host.server.generate("w", PROMPTS[0], GREEDY, 3))
        assert set(forward_threads) == {threading.get_ident()}
        forward_threads.clear()
        for i in range(2):  # nobody waits in call: the host's own compute thread, the same one each time
            host.submit(host.server.generate(f"o{i}", PROMPTS[0], GREEDY, 3)).result()
        assert len(set(forward_threads)) == 1 and forward_threads[0] != threading.get_ident()
    finally:
        hook.remove()
