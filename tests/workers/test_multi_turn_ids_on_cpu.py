"""The ids a rollout server received are exactly the stored trajectory's prompt + response ids (issue 16).

Real pieces end to end: the shipped agent model (SFT'd to call the calculator) served by the ``hf`` server
behind a ``RolloutWorker``, the ``tool_agent`` loop with the shipped calculator tool list, run by an
``AgentLoopWorker`` that writes to the KV store, on rows of the calculator task's val set whose
trajectories call the tool. The server records each request it serves (``hf_recording`` in probes.py:
the generation stays the real one). For every trajectory read back from the KV store, with its requests
found by request id (``{prompt key}-{sample}-{turn}``):

* its last request's prompt + returned tokens is, exactly, the stored prompt + response;
* each earlier request's prompt + returned tokens is a prefix of that, so no turn was re-tokenized;
* ``response_mask`` is 1 exactly on the tokens the server returned, 0 on the tool observations and template
  tokens between them, and ``rollout_log_probs`` are the server's log-probs there (0 elsewhere).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from tests.workers.helpers import actor_config, make_workers, release
from tests.workers.probes import InspectableRollout
from verl_lite.data.rl_dataset import RLHFDataset
from verl_lite.kv import KVBatchMeta
from verl_lite.single_controller.ray import RayClassWithInitArgs
from verl_lite.trajectory import trajectory_key
from verl_lite.utils.config import from_config
from verl_lite.workers.agent_loop.manager import AgentLoopManager
from verl_lite.workers.agent_loop.worker import prompt_rows
from verl_lite.workers.config import ActorRolloutRefConfig

PACKAGE = Path(__file__).resolve().parents[2] / "verl_lite"
AGENT_MODEL = PACKAGE / "assets" / "tiny_agent_model"
CALCULATOR = PACKAGE / "configs" / "tools" / "calculator.yaml"
VAL = PACKAGE / "assets" / "synthetic_tools" / "val.parquet"
# val rows on which the agent model calls the calculator (call, tool result, answer) in both samples (each
# request is seeded by its id, so which rows these are depends on the prompt keys calc{row} below)
ROWS = (0, 3, 7, 9)


def rollout_config() -> dict:
    rollout = {
        "n": 2,
        "prompt_length": 96,
        "response_length": 192,
        "agent": {"default_agent_loop": "tool_agent"},
        "multi_turn": {
            "tool_config_path": str(CALCULATOR),
            "format": "hermes",
            "max_assistant_turns": 3,
            "max_user_turns": 2,
        },
    }
    return actor_config(str(AGENT_MODEL), "hf_recording", sections={"rollout": rollout})


def put_prompts(kv, uids: list[str]) -> tuple[KVBatchMeta, list[dict]]:
    """The val rows ``ROWS`` as the trainer submits prompt groups: markers in the store, rows with the call."""
    tokenizer = AutoTokenizer.from_pretrained(AGENT_MODEL)
    dataset = RLHFDataset(str(VAL), tokenizer, max_prompt_length=96, split="val")
    items = [dataset[i] for i in ROWS]
    return kv.kv_batch_put(uids, "train", tags=[{"uid": u} for u in uids]), prompt_rows(items)


def requests_by_trajectory(requests: list[dict]) -> dict[str, list[dict]]:
    """``{"{prompt key}-{sample}": [request of turn 0, turn 1, ...]}`` from the StickyClient's request ids."""
    grouped: dict[str, dict[int, dict]] = {}
    for request in requests:
        prefix, turn = request["request_id"].rsplit("-", 1)
        assert int(turn) not in grouped.setdefault(prefix, {}), f"request id {request['request_id']} twice"
        grouped[prefix][int(turn)] = request
    for prefix, turns in grouped.items():
        assert sorted(turns) == list(range(len(turns))), f"{prefix}: turns {sorted(turns)}"
    return {prefix: [turns[t] for t in range(len(turns))] for prefix, turns in grouped.items()}


@pytest.fixture
def served(kv_store):
    """(stored trajectories' meta, their fields, every request the server got) of one generation."""
    config = rollout_config()
    rollout = make_workers("rollout", RayClassWithInitArgs(InspectableRollout, config=config))
    manager = None
    try:
        # hybrid by default: the agent loops will run in the server's process, on its loop
        manager = AgentLoopManager(from_config(ActorRolloutRefConfig, config), None, rollout)
        rollout.init_model()
        meta = manager.generate_sequences(*put_prompts(kv_store, [f"calc{i}" for i in ROWS]))
        [requests] = rollout.recorded_requests()
        # read while the server's process lives: it wrote the rows, and they live as long as their writer
        stored = kv_store.kv_batch_get(
            meta.keys, "train", select_fields=["prompts", "responses", "response_mask", "rollout_log_probs"]
        )
    finally:
        if manager is not None:
            manager.shutdown()
        release(rollout)
    return meta, stored, requests


def test_server_received_ids_are_the_stored_prompt_and_response_ids(served):
    meta, stored, requests = served
    by_trajectory = requests_by_trajectory(requests)
    expected_keys = [trajectory_key(f"calc{i}", s, 0) for i in ROWS for s in range(2)]
    assert sorted(meta.keys) == sorted(expected_keys)
    assert sorted(by_trajectory) == sorted(f"calc{i}-{s}" for i in ROWS for s in range(2))
    for position, (key, tag) in enumerate(zip(meta.keys, meta.tags)):
        sample = int(key.split("_")[1])
        turns = by_trajectory[f"{tag['uid']}-{sample}"]
        prompt = stored["prompts"][position].tolist()
        response = stored["responses"][position].tolist()
        mask = stored["response_mask"][position].tolist()
        log_probs = stored["rollout_log_probs"][position]
        assert (len(prompt), len(response)) == (tag["prompt_len"], tag["response_len"])
        assert len(mask) == len(log_probs) == len(response)
        # a real multi-turn trajectory: the model called the calculator and answered after its result
        assert tag["num_turns"] >= 3 and tag["agent"]["tool_calls"] >= 1 and len(turns) >= 2, key

        full = prompt + response
        last = turns[-1]
        assert last["prompt_ids"] + last["token_ids"] == full, key
        assert turns[0]["prompt_ids"] == prompt, key
        expected_mask = [0] * len(response)
        expected_log_probs = torch.zeros(len(response))
        for turn in turns:
            seen = turn["prompt_ids"] + turn["token_ids"]
            assert full[: len(seen)] == seen, f"{turn['request_id']}: not a prefix of the stored ids"
            start = len(turn["prompt_ids"]) - len(prompt)
            end = start + len(turn["token_ids"])
            expected_mask[start:end] = [1] * (end - start)
            expected_log_probs[start:end] = torch.tensor(turn["log_probs"])
        assert mask == expected_mask, key
        assert sum(mask) == sum(len(t["token_ids"]) for t in turns) < len(response)
        assert torch.equal(log_probs, expected_log_probs), key
