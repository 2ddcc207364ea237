"""``AgentLoopWorker``: runs many agent loops at once against the rollout servers and stores what they produce.

An async Ray actor on the rollout side, or (hybrid placement) an object on a rollout server's own event
loop in the server's process. For its share of a batch of prompt keys it starts ``n``
trajectories per prompt (each an ``AgentLoop`` chosen by the row's ``agent_name``), sends every request
to the least-loaded live server and keeps a trajectory on that server across turns (its prefix cache;
a request whose server died goes to another, see ``servers.py``), scores
each trajectory as it finishes and writes it to the KV store, its tag saying how many samples its group
has (the replay buffer reads a group's status from those tags). Only keys and tags go back to the
controller.
"""

from __future__ import annotations

import asyncio
import functools
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from verl_lite.kv import KVBatchMeta, get_kv_client
from verl_lite.protocol import to_jagged
from verl_lite.reward.trajectory_scoring import ScoredResponse, reward_item, score_items
from verl_lite.trajectory import (
    FAILURE,
    PROMPT_FIELDS,
    SUCCESS,
    read_columns,
    trajectory_key,
    trajectory_tag,
    write_columns,
)
from verl_lite.utils.config import from_config
from verl_lite.utils.metrics import Metric
from verl_lite.workers.agent_loop.base import AgentLoopContext, AgentLoopOutput, get_agent_loop
from verl_lite.workers.agent_loop.servers import LeastLoadedServers, StickyClient
from verl_lite.workers.config import ActorRolloutRefConfig, SamplingConfig
from verl_lite.workers.sequences import on_last_token

# One greedy decode per prompt: the baseline response of estimators that declare greedy_baseline (ReMax).
GREEDY_SAMPLING = SamplingConfig(n=1, temperature=0.0, do_sample=False)
# The metrics a generation hands back: the seconds the slowest agent-loop worker spent scoring; counters
# (summed) of requests sent again because their server died and of servers Ray restarted (the manager
# adds those); when (``time.time()``) the last worker's call ended, for the rollout's idle time.
REWARD_SECONDS = "timing_s/reward"
REQUESTS_RETRIED = "rollout/requests_retried"
SERVER_RESTARTS = "rollout/server_restarts"
FINISHED_AT = "rollout/finished_at"
# Threads of a worker's own blocking work (reading rows, scoring, storing): never the event loop's default
# pool, which user code (a server's, a tool's) may fill with calls that do not return.
OWN_THREADS = 4


@dataclass
class _Finished:
    """A trajectory whose loop returned, waiting to be scored and written."""

    prompt_index: int
    sample_index: int
    output: AgentLoopOutput


@dataclass
class _Batch:
    """The bookkeeping of one ``generate_sequences`` call."""

    meta: KVBatchMeta
    rows: list[dict[str, Any]]
    n: int
    step: int
    baselines: list[asyncio.Future] | None
    keys: dict[tuple[int, int], str] = field(default_factory=dict)
    tags: dict[tuple[int, int], dict] = field(default_factory=dict)
    scoring_s: float = 0.0


class AgentLoopWorker:
    """Runs agent loops for its share of each batch (``rollout.agent.num_workers`` of these share a batch).

    Args:
        config: the ``actor_rollout_ref`` config.
        reward_config: the ``reward`` config (its manager scores finished trajectories), or None.
        clients: one client per rollout server, in replica order: a ``RolloutClient`` of its ``generate``
            endpoint for a worker of its own, an ``InProcessClient`` on the server's loop in its process.
        probes: every server's ``load`` endpoint (polled after a server failed), in the same order; None
            where a failed server cannot come back.
        index: this worker's index (staggers its first choice of server).
    """

    def __init__(
        self, config: Any, reward_config: Any, clients: list, probes: list | None = None, index: int = 0
    ):
        from transformers import AutoTokenizer

        from verl_lite.utils.extensions import load_extensions_from_env

        load_extensions_from_env()
        self.config = from_config(ActorRolloutRefConfig, config)
        rollout = self.config.rollout
        model = self.config.model
        self.tokenizer = AutoTokenizer.from_pretrained(model.tokenizer_path or model.path)
        self.context = AgentLoopContext.from_config(self.tokenizer, rollout)
        self.default_agent = rollout.agent.default_agent_loop
        if rollout.mode == "standalone":
            death_note = f" and rollout.max_restarts={rollout.max_restarts} restarts were used up"
        else:
            death_note = "; a hybrid server dies with its actor process: rollout.mode=standalone survives it"
        self.servers = LeastLoadedServers(clients, probes, offset=index, death_note=death_note)
        self.reward_manager = None
        if reward_config is not None:
            from verl_lite.reward import build_reward_manager

            self.reward_manager = build_reward_manager(reward_config)
        self.kv = get_kv_client()
        self.index = index
        self._threads = ThreadPoolExecutor(max_workers=OWN_THREADS, thread_name_prefix="agent-loop-worker")

    def close(self) -> None:
        """Let this worker's own threads end (the process may host another run's worker next)."""
        self._threads.shutdown(wait=False, cancel_futures=True)

    async def _off_loop(self, fn, /, *args):
        """``fn(*args)`` on this worker's own threads (see ``OWN_THREADS``)."""
        return await asyncio.get_running_loop().run_in_executor(self._threads, functools.partial(fn, *args))

    async def generate_sequences(
        self,
        meta: KVBatchMeta,
        rows: list[dict[str, Any]],
        validate: bool = False,
        greedy_baseline: bool = False,
    ) -> KVBatchMeta:
        """``n`` trajectories per prompt group of ``meta``, scored and stored as ``{uid}_{sample}_0``.

        ``rows`` are the groups' prompts, in ``meta``'s order, as :func:`prompt_rows` makes them:
        ``prompt_ids`` and, when present, the ``PROMPT_FIELDS`` of ``verl_lite.trajectory``. Writes per
        trajectory ``prompts``, ``responses``, ``response_mask`` (0 on tool/observation tokens),
        ``rollout_log_probs`` and (with a reward manager) ``token_level_scores`` on the last model
        token; tags it with its score, acc, ``num_turns``, the min/max weight version and the agent's
        counters and its group's sample count (its status is ``failure`` when scoring raised).

        With ``greedy_baseline`` (estimators that declare ``EstimatorNeeds.greedy_baseline``, as ReMax
        does) each prompt also gets one greedy trajectory from the same agent loop, scored by the same
        reward manager; its score becomes the (batch,) field ``reward_baselines`` of every sampled
        trajectory of the prompt. The greedy trajectory itself is neither stored nor trained on.
        """
        rollout = self.config.rollout
        if not len(meta):
            return KVBatchMeta(keys=[], partition_id=meta.partition_id, global_step=meta.global_step)
        sampling = rollout.val_kwargs if validate else rollout.train_sampling()
        if len(rows) != len(meta):
            raise ValueError(f"generate_sequences: {len(rows)} prompt rows for {len(meta)} prompt groups.")
        # verl's data files carry per-row tool arguments in extra_info.tools_kwargs
        rows = [
            {**row, "tools_kwargs": (row.get("extra_info") or {}).get("tools_kwargs") or {}} for row in rows
        ]
        batch = _Batch(
            meta=meta,
            rows=rows,
            n=sampling.n,
            step=meta.global_step,
            baselines=None,
        )
        if greedy_baseline and not validate:
            if self.reward_manager is None or "data_source" not in rows[0]:
                raise ValueError(
                    "a greedy reward baseline needs the rollout's reward manager and the prompts' data_source; "
                    "choose an estimator without one (e.g. grpo)."
                )
            batch.baselines = [
                asyncio.ensure_future(self._greedy_baseline(batch, i)) for i in range(len(rows))
            ]
        retried_before = self.servers.retried
        finished: asyncio.Queue = asyncio.Queue()
        writer = asyncio.ensure_future(self._write_as_finished(batch, finished, len(rows) * sampling.n))
        loops = [
            asyncio.ensure_future(self._run_trajectory(batch, i, s, sampling, finished))
            for i in range(len(rows))
            for s in range(sampling.n)
        ]
        try:
            await asyncio.gather(*loops)
            await writer
        finally:
            for task in [*loops, writer, *(batch.baselines or [])]:
                task.cancel()
        order = sorted(batch.keys)
        out = KVBatchMeta(
            keys=[batch.keys[k] for k in order],
            tags=[batch.tags[k] for k in order],
            partition_id=meta.partition_id,
            fields=self._stored_fields(batch),
            global_step=meta.global_step,
            samples_per_prompt=sampling.n,
        )
        out.metrics = {
            REWARD_SECONDS: Metric(batch.scoring_s, reduce="max"),
            REQUESTS_RETRIED: Metric(float(self.servers.retried - retried_before), reduce="sum"),
            FINISHED_AT: Metric(time.time(), reduce="max"),
        }
        return out

    async def decode(self, meta: KVBatchMeta) -> dict[str, dict[str, str]]:
        """``{key: {"prompt": text, "response": text}}`` for ``meta``'s trajectories (for the JSONL dumps)."""
        if not len(meta):
            return {}
        td = await self._off_loop(read_columns, self.kv, meta, ["prompts", "responses"])
        decode = self.tokenizer.batch_decode
        prompts = decode([t.tolist() for t in td.get("prompts").unbind()], skip_special_tokens=True)
        responses = decode([t.tolist() for t in td.get("responses").unbind()], skip_special_tokens=True)
        return {key: {"prompt": p, "response": r} for key, p, r in zip(meta.keys, prompts, responses)}

    async def put_scores(self, meta: KVBatchMeta, scores: list[float]) -> None:
        """Write ``token_level_scores`` of ``meta``'s trajectories: ``scores`` (one per trajectory, in
        ``meta``'s order) on each one's last model token, as a reward manager's score is."""
        if len(scores) != len(meta):
            raise ValueError(f"put_scores: {len(scores)} scores for {len(meta)} trajectories.")
        if len(meta):
            await self._off_loop(self._put_scores, meta, scores)

    def _put_scores(self, meta: KVBatchMeta, scores: list[float]) -> None:
        masks = read_columns(self.kv, meta, ["response_mask"]).get("response_mask").unbind()
        columns = {
            "token_level_scores": to_jagged(
                [on_last_token(len(m), s, m.tolist()) for m, s in zip(masks, scores)]
            )
        }
        write_columns(self.kv, meta.keys, meta.partition_id, columns)

    # ---- one trajectory -------------------------------------------------------------------------
    def _agent_for(self, row: dict[str, Any]):
        name = row.get("agent_name") or self.default_agent
        return get_agent_loop(name)(self.context)

    async def _run_trajectory(
        self, batch: _Batch, i: int, s: int, sampling: SamplingConfig, finished: asyncio.Queue
    ) -> None:
        row = batch.rows[i]
        client = StickyClient(self.servers, f"{batch.meta.keys[i]}-{s}")
        output = await self._agent_for(row).run(row, client, sampling, self.config.rollout.response_length)
        await finished.put(_Finished(i, s, output))

    async def _greedy_baseline(self, batch: _Batch, i: int) -> tuple[float, str | None]:
        row = batch.rows[i]
        client = StickyClient(self.servers, f"{batch.meta.keys[i]}-greedy")
        output = await self._agent_for(row).run(
            row, client, GREEDY_SAMPLING, self.config.rollout.response_length
        )
        [result] = await self._off_loop(self._score, [(row, output)])
        error = f"greedy baseline: {result.error}" if result.error else None
        return result.score, error

    # ---- scoring and storing, as trajectories finish --------------------------------------------
    async def _write_as_finished(self, batch: _Batch, finished: asyncio.Queue, total: int) -> None:
        """Score and store whatever has finished since the last write, until all ``total`` are stored."""
        stored = 0
        while stored < total:
            ready = [await finished.get()]
            while not finished.empty():
                ready.append(finished.get_nowait())
            baselines = None
            if batch.baselines is not None:
                baselines = [await batch.baselines[f.prompt_index] for f in ready]
            await self._off_loop(self._store, batch, ready, baselines)
            stored += len(ready)

    def _score(self, pairs: list[tuple[dict, AgentLoopOutput]]) -> list[ScoredResponse | None]:
        """The reward manager's score of each response; a reward the loop decided replaces it."""
        if self.reward_manager is None or "data_source" not in pairs[0][0]:
            return [None] * len(pairs)
        texts = self.tokenizer.batch_decode([out.response_ids for _, out in pairs], skip_special_tokens=True)
        items = [
            reward_item(
                _with_tool_rewards(row, out), text, len(out.response_ids), self.config.rollout.response_length
            )
            for (row, out), text in zip(pairs, texts)
        ]
        scored = score_items(self.reward_manager, items)
        return [
            result if out.reward is None else ScoredResponse(score=out.reward, acc=float(out.reward > 0))
            for result, (_, out) in zip(scored, pairs)
        ]

    def _store(self, batch: _Batch, ready: list[_Finished], baselines: list | None) -> None:
        start = time.perf_counter()
        results = self._score([(batch.rows[f.prompt_index], f.output) for f in ready])
        batch.scoring_s += time.perf_counter() - start
        keys, tags = [], []
        for position, (done, result) in enumerate(zip(ready, results)):
            i, out = done.prompt_index, done.output
            uid = batch.meta.tags[i].get("uid", batch.meta.keys[i])
            key = trajectory_key(uid, done.sample_index, 0)
            extra: dict[str, Any] = {
                "finish_reason": out.finish_reason,
                "weight_version": out.max_weight_version,
                "min_weight_version": out.min_weight_version,
                "max_weight_version": out.max_weight_version,
                "num_turns": out.num_turns,
                "sampled_len": int(sum(out.response_mask)),
                "agent": dict(out.metrics),
            }
            status = SUCCESS
            if result is not None:
                extra.update(score=result.score, acc=result.acc)
                if result.pred is not None:
                    extra["pred"] = str(result.pred)
                if result.reward_extra:
                    extra["reward_extra"] = result.reward_extra
                if result.error:
                    status, extra["error"] = FAILURE, result.error
            if baselines is not None and baselines[position][1]:
                status, extra["error"] = FAILURE, baselines[position][1]
            tag = trajectory_tag(
                uid, status, len(out.prompt_ids), len(out.response_ids), batch.step, batch.n, **extra
            )
            keys.append(key)
            tags.append(tag)
            batch.keys[(i, done.sample_index)] = key
            batch.tags[(i, done.sample_index)] = tag
        write_columns(self.kv, keys, batch.meta.partition_id, self._fields(ready, results, baselines), tags)

    def _fields(self, ready: list[_Finished], results: list, baselines: list | None) -> dict[str, Any]:
        outputs = [f.output for f in ready]
        fields: dict[str, Any] = {
            "prompts": to_jagged([o.prompt_ids for o in outputs], torch.long),
            "responses": to_jagged([o.response_ids for o in outputs], torch.long),
            "response_mask": to_jagged([o.response_mask for o in outputs], torch.int64),
            "rollout_log_probs": to_jagged([o.response_log_probs for o in outputs], torch.float32),
        }
        if results[0] is not None:
            fields["token_level_scores"] = to_jagged(
                [
                    on_last_token(len(o.response_ids), res.score, o.response_mask)
                    for o, res in zip(outputs, results)
                ]
            )
        if baselines is not None:
            fields["reward_baselines"] = torch.tensor([score for score, _ in baselines], dtype=torch.float32)
        return fields

    def _stored_fields(self, batch: _Batch) -> list[str]:
        fields = ["prompts", "responses", "response_mask", "rollout_log_probs"]
        if self.reward_manager is not None and "data_source" in batch.rows[0]:
            fields.append("token_level_scores")
        if batch.baselines is not None:
            fields.append("reward_baselines")
        return sorted(fields)


def prompt_rows(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What ``generate_sequences`` takes of dataset rows: ``prompt_ids`` (a list) and the ``PROMPT_FIELDS``
    present in the first row."""
    names = [name for name in PROMPT_FIELDS if name in items[0]] if items else []
    return [{"prompt_ids": _id_list(it["prompt_ids"]), **{n: it[n] for n in names}} for it in items]


def _id_list(ids: Any) -> list[int]:
    return ids.tolist() if hasattr(ids, "tolist") else [int(i) for i in ids]


__all__ = [
    "FINISHED_AT",
    "REQUESTS_RETRIED",
    "REWARD_SECONDS",
    "SERVER_RESTARTS",
    "AgentLoopWorker",
    "prompt_rows",
]


def _with_tool_rewards(row: dict[str, Any], out: AgentLoopOutput) -> dict[str, Any]:
    """``row`` whose extra_info carries the tools' calc_reward values (``tool_rewards``) and the interaction's
    per-turn scores (``turn_scores``), when there are any."""
    extra = {"tool_rewards": dict(out.tool_rewards), "turn_scores": list(out.turn_scores)}
    extra = {key: value for key, value in extra.items() if value}
    if not extra:
        return row
    return {**row, "extra_info": {**(row.get("extra_info") or {}), **extra}}
