"""``RolloutWorker``: one rollout replica — a rollout server in this process, its weights and its requests.

In the ``hybrid`` placement it is colocated with the policy worker (same process, so the ``naive``
checkpoint engine hands the weights over in place); in ``standalone`` it lives on its own resource pool
and the weights arrive through the ``ray`` (or, on GPUs, ``nccl``) checkpoint engine. Agent loops on
other processes send their requests to its ``generate`` endpoint through a ``RolloutClient`` (many per
call, replies streamed as they finish). In the hybrid placement the agent loops of this replica's share
of a batch may instead run here, on the server's own loop (``start_agent_loops``; the default of
``rollout.agent.num_workers``), so that a request costs an await rather than a Ray call. The controller
drives the rest through the group methods. A standalone replica that Ray restarts after its process
died starts its server and loads the latest weights in its constructor (see
:mod:`verl_lite.workers.rollout.recovery`).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from typing import Any

from verl_lite.checkpoint_engine import get_checkpoint_engine
from verl_lite.kv import KVBatchMeta
from verl_lite.single_controller import Dispatch, Worker, endpoint, register
from verl_lite.utils.config import from_config
from verl_lite.utils.metrics import Metric
from verl_lite.workers.config import ActorRolloutRefConfig
from verl_lite.workers.rollout.client import GenerateRequest, InProcessClient, serve_requests
from verl_lite.workers.rollout.host import ServerHost
from verl_lite.workers.rollout.server import TokenOutput, get_rollout


class RolloutWorker(Worker):
    """Hosts one ``RolloutServer`` on a background event loop and exposes it to callers and the controller.

    Args:
        config: the ``actor_rollout_ref`` config (model path, rollout settings).
        sleeps_between_steps: release the engine's memory from the end of a generation until the next
            weight sync (``rollout.free_cache_engine`` in the hybrid placement, where training needs it).
        recovery: the standalone placement's ``RecoveryBoard``: a replica built again by Ray (its process
            died) starts serving here, with the latest weights, instead of waiting for ``init_model``.
    """

    def __init__(self, config: Any, sleeps_between_steps: bool = False, recovery: Any = None):
        super().__init__()
        self.config = from_config(ActorRolloutRefConfig, config)
        self.sleeps_between_steps = sleeps_between_steps
        self.server = self.host = self.sync = None
        self.agent_loops = None  # the in-process AgentLoopWorker, once start_agent_loops made it
        self.asleep = False
        if recovery is not None:
            import ray

            restarted, latest = ray.get(recovery.arrive.remote(self.rank))
            if restarted:
                self._serve_as_replacement(latest)

    def _serve_as_replacement(self, latest: tuple[Any, int] | None) -> None:
        """Start the server and load the latest published weights (none yet: the model's own are current)."""
        self.init_model()
        version = self.server.weight_version
        if latest is not None:
            handle, version = latest
            self.receive_weights(handle, version)
        print(
            f"verl_lite: rollout server {self.rank} was restarted by Ray after its process died; it serves "
            f"again with weight version {version}.",
            file=sys.stderr,
            flush=True,
        )

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Start the server (tokenizer ids only: token ids in, token ids out) and its weight receiver."""
        from transformers import AutoTokenizer

        cfg = self.config
        tokenizer = AutoTokenizer.from_pretrained(cfg.model.tokenizer_path or cfg.model.path)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        server_cls = get_rollout(cfg.rollout.name)
        # a LoRA actor syncs adapters only: served as adapters where the backend can, merged otherwise
        lora = (
            {"lora_rank": cfg.model.lora_rank}
            if cfg.model.lora_rank and server_cls.serves_lora_adapters
            else {}
        )
        self.host = ServerHost(
            lambda: server_cls(cfg.model.path, cfg.rollout, tokenizer.eos_token_id, pad, **lora)
        )
        self.server = self.host.server
        self.server.seed = cfg.engine.seed
        self.sync = get_checkpoint_engine(cfg.rollout.checkpoint_engine)(
            cfg.rollout.update_weights_bucket_megabytes, rank=self.rank
        )
        if self.sleeps_between_steps and not self.server.supports_sleep:
            self.sleeps_between_steps = False
            if self.rank == 0:
                print(
                    f"verl_lite: rollout.free_cache_engine=true skipped: the {cfg.rollout.name!r} rollout "
                    "backend cannot sleep on this machine (vLLM sleeps on CUDA only; hf keeps no cache "
                    "between calls).",
                    file=sys.stderr,
                    flush=True,
                )
        self.register_mesh("rollout", dp_rank=self.rank, is_collect=True)

    # ---- the per-request endpoints ---------------------------------------------------------------
    @endpoint
    async def generate(self, requests: list[GenerateRequest]) -> AsyncIterator[list[tuple[int, TokenOutput]]]:
        """Serve ``requests`` at once, streaming ``[(position, TokenOutput)]`` as they finish (``RolloutClient``).

        Call it with ``.options(num_returns="streaming")``; see ``RolloutServer.generate`` for one request.
        """

        async def one(request: GenerateRequest) -> TokenOutput:
            coro = self.server.generate(
                request.request_id, request.prompt_ids, request.sampling, request.max_tokens
            )
            return await asyncio.wrap_future(self.host.submit(coro))

        async for finished in serve_requests(one, requests):
            yield finished

    @endpoint
    def generate_sequences(
        self, meta: KVBatchMeta, rows: list[dict], validate: bool = False, greedy_baseline: bool = False
    ) -> KVBatchMeta:
        """This replica's share of a batch through the in-process agent loops (``AgentLoopWorker``'s)."""
        return self.host.call(self._agent_loops().generate_sequences(meta, rows, validate, greedy_baseline))

    @endpoint
    def decode(self, meta: KVBatchMeta) -> dict[str, dict[str, str]]:
        """Prompt and response texts of ``meta``'s trajectories (``AgentLoopWorker.decode``)."""
        return self.host.call(self._agent_loops().decode(meta))

    @endpoint
    def put_scores(self, meta: KVBatchMeta, scores: list[float]) -> None:
        """``token_level_scores`` from one score per trajectory (``AgentLoopWorker.put_scores``)."""
        return self.host.call(self._agent_loops().put_scores(meta, scores))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def start_agent_loops(self, reward_config: Any) -> None:
        """Run agent loops here, on the server's loop, scoring with ``reward_config`` (None: no scoring)."""
        from verl_lite.workers.agent_loop.worker import AgentLoopWorker

        async def build() -> AgentLoopWorker:  # on the loop: the worker's asyncio state belongs to it
            return AgentLoopWorker(
                self.config, reward_config, [InProcessClient(self.server)], index=self.rank
            )

        self.agent_loops = self.host.call(build())

    def _agent_loops(self):
        if self.agent_loops is None:
            raise RuntimeError("start_agent_loops must run before this rollout worker generates sequences.")
        return self.agent_loops

    @endpoint
    def load(self) -> int:
        """Requests in flight on this replica (what the agent-loop manager balances on)."""
        return self.server.load

    # ---- what the controller drives -------------------------------------------------------------
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def receive_weights(self, handle: Any, version: int) -> dict[str, Metric]:
        """Load the weights behind ``handle`` as ``version`` (waking the engine first); returns the bytes."""
        self.wake_up()
        received = {"bytes": 0.0}
        # called here, on the thread Ray runs this method on: an engine that gathers eagerly (naive) gathers
        # on the training thread of a hybrid process
        pairs = self.sync.receive_weights(handle, version)

        def counted():
            for name, tensor in pairs:
                received["bytes"] += tensor.numel() * tensor.element_size()
                yield name, tensor

        self.host.call(self.server.load_weights(counted(), version))
        return {"update_weights/bytes": Metric(received["bytes"])}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def sleeps(self) -> bool:
        """Whether this replica sleeps after a generation (its placement asks for it and its backend can)."""
        return self.sleeps_between_steps

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def sleep(self) -> None:
        """Release generation memory until the next weight sync (only where the placement asks and it can)."""
        if self.sleeps_between_steps and not self.asleep:
            self.host.call(self.server.sleep())
            self.asleep = True

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def wake_up(self) -> None:
        """Re-acquire what :meth:`sleep` released."""
        if self.asleep:
            self.host.call(self.server.wake_up())
            self.asleep = False

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def abort_all(self) -> None:
        """Return every in-flight request now with the tokens generated so far; hold new ones until resume."""
        self.host.call(self.server.abort_all())

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def resume(self) -> None:
        """Serve requests again after :meth:`abort_all`."""
        self.host.call(self.server.resume())

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def weight_version(self) -> int:
        """The weight version (global step) this replica serves (-1 before the first sync)."""
        return self.server.weight_version

    def close(self) -> bool:
        """Shut the server down (its engine's processes end); whether this process may host another worker."""
        if getattr(self, "host", None) is None:
            return True
        reusable = type(self.server).leaves_process_reusable
        if self.agent_loops is not None:
            self.agent_loops.close()
        self.host.shutdown()
        self.host = self.server = self.agent_loops = None
        return reusable

    def __del__(self) -> None:
        self.close()


__all__ = ["RolloutWorker"]
