"""The OpenAI-compatible HTTP endpoint in front of the rollout servers: one base URL per live trajectory.

Starlette routes served by uvicorn as a task on the event loop the agent loops run on (one endpoint per
process and loop, started at its first use), on loopback and a free port. Each trajectory gets a base URL
``http://127.0.0.1:<port>/<token>/v1`` whose token is unguessable (``secrets.token_urlsafe``): a request
is attributed to its trajectory by the URL it came to, never by what the client says, and a URL stops
serving when its trajectory ends. Routes under it: ``POST /chat/completions`` and ``GET /models``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import socket
import time
import weakref

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from verl_lite.workers.openai_api.schema import RequestError, parse_chat_request
from verl_lite.workers.openai_api.session import MODEL_ID, ChatSession

HOST = "127.0.0.1"
# Bytes of the token in a trajectory's URL.
TOKEN_BYTES = 24


class _QuietServer(uvicorn.Server):
    """A uvicorn server that leaves the process's signal handlers to their owner (Ray, pytest)."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


class OpenAIEndpoint:
    """The HTTP server and the sessions it serves; use :func:`endpoint_on_this_loop`."""

    def __init__(self):
        self.sessions: dict[str, ChatSession] = {}
        self.port: int | None = None
        self._server: _QuietServer | None = None
        self._task: asyncio.Task | None = None
        # The start, awaited by every first user (see endpoint_on_this_loop).
        self.started: asyncio.Future | None = None
        self.app = Starlette(
            routes=[
                Route("/{token}/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/{token}/v1/models", self._models, methods=["GET"]),
            ]
        )

    async def start(self) -> None:
        """Listen on loopback at a free port (returns once it accepts connections)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((HOST, 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off")
        self._server = _QuietServer(config)
        self._task = asyncio.ensure_future(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
            await asyncio.sleep(0.01)

    def open(self, session: ChatSession) -> tuple[str, str]:
        """Serve ``session`` under a fresh token; returns ``(token, base_url)``."""
        token = secrets.token_urlsafe(TOKEN_BYTES)
        self.sessions[token] = session
        return token, f"http://{HOST}:{self.port}/{token}/v1"

    def close(self, token: str) -> None:
        """Stop serving the session of ``token`` (its URL answers 404 from now on)."""
        self.sessions.pop(token, None)

    def _session(self, request: Request) -> ChatSession:
        session = self.sessions.get(request.path_params["token"])
        if session is None:
            raise RequestError("no live trajectory is served at this URL.", status=404, code="unknown_url")
        return session

    async def _chat(self, request: Request) -> JSONResponse:
        try:
            session = self._session(request)
            try:
                body = json.loads(await request.body())
            except ValueError:
                raise RequestError("the request body is not valid JSON.") from None
            chat_request = parse_chat_request(body)
        except RequestError as err:
            return JSONResponse(err.body(), status_code=err.status)
        try:
            return JSONResponse(await session.complete(chat_request))
        except RequestError as err:
            return JSONResponse(err.body(), status_code=err.status)
        except Exception as err:  # ours, not the agent's: the trajectory's loop raises it
            session.fatal = err
            error = RequestError(f"the rollout failed: {type(err).__name__}: {err}", status=500)
            return JSONResponse(error.body(), status_code=500)

    async def _models(self, request: Request) -> JSONResponse:
        try:
            self._session(request)
        except RequestError as err:
            return JSONResponse(err.body(), status_code=err.status)
        model = {"id": MODEL_ID, "object": "model", "created": int(time.time()), "owned_by": "verl_lite"}
        return JSONResponse({"object": "list", "data": [model]})


# One endpoint per event loop (the agent loops of a process may run on more than one loop in tests).
_ENDPOINTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, OpenAIEndpoint] = weakref.WeakKeyDictionary()


async def endpoint_on_this_loop() -> OpenAIEndpoint:
    """The running event loop's endpoint, started on first use (concurrent first callers share the start)."""
    loop = asyncio.get_running_loop()
    endpoint = _ENDPOINTS.get(loop)
    if endpoint is None:
        endpoint = _ENDPOINTS[loop] = OpenAIEndpoint()
        endpoint.started = asyncio.ensure_future(endpoint.start())
    await asyncio.shield(endpoint.started)
    return endpoint


__all__ = ["OpenAIEndpoint", "endpoint_on_this_loop"]
