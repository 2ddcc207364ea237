"""The direct socket channel between KV clients and storage units: framing, authentication, calls.

A Ray actor call costs ~1 ms per round trip here (submission, scheduling, reply through the
raylet); a unit's work on a batch of keys costs far less. So storage units are Ray actors for
placement, naming and object references, but clients send their requests (put, get, tags,
clear, listings) over a TCP connection straight to the unit's asyncio server: ~0.05 ms a round
trip. verl's TransferQueue makes the same split with ZeroMQ.

Frames are an 8-byte big-endian length and a pickled payload (``verl_lite.kv.wire``). Every
connection starts with a challenge: the unit sends a random nonce and the client answers with
its HMAC-SHA256 under the store's secret, which clients receive only through Ray (``describe``),
so only processes of the Ray job can talk to a unit. Numpy-free and torch-free: units import it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import secrets
import socket
import struct
import threading
from collections.abc import Awaitable, Callable

from verl_lite.kv.errors import KVStoreClosedError

_HEADER = struct.Struct("!Q")
_NONCE_BYTES = 32
_DIGEST_BYTES = hashlib.sha256().digest_size


def new_secret() -> bytes:
    """A random secret for one store's channel."""
    return secrets.token_bytes(32)


def _answer(secret: bytes, nonce: bytes) -> bytes:
    return hmac.new(secret, nonce, hashlib.sha256).digest()


# ---------------------------------------------------------------------------------------- unit
async def serve(
    host: str, secret: bytes, handle: Callable[[bytes], bytes | Awaitable[bytes]]
) -> asyncio.Server:
    """Start the unit's server on ``host`` (any free port); ``handle(request)`` answers each frame
    with the reply, or with an awaitable of it when it has to wait.

    Frames of one connection are answered in order. A handler that returns its reply directly runs
    in one step of the event loop, so it sees and changes the unit's state atomically.
    """
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: _UnitConnection(secret, handle), host, 0)


class _UnitConnection(asyncio.Protocol):
    """One client's connection to a unit: the challenge, then length-prefixed request frames.

    A protocol rather than asyncio streams: frames are parsed and answered in the callback that
    received them, without a coroutine switch per read (a request costs tens of microseconds).
    """

    def __init__(self, secret: bytes, handle: Callable[[bytes], bytes | Awaitable[bytes]]):
        self.secret, self.handle = secret, handle
        self.buffer = bytearray()
        self.nonce: bytes | None = None  # None once the client answered the challenge
        self.waiting: asyncio.Future | None = None  # a reply being awaited: later frames wait
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.nonce = secrets.token_bytes(_NONCE_BYTES)
        transport.write(self.nonce)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._answer_frames()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiting is not None:  # nobody is left to read the reply
            self.waiting.cancel()

    def _answer_frames(self) -> None:
        buffer = self.buffer
        while self.waiting is None and not self.transport.is_closing():
            if self.nonce is not None:
                if len(buffer) < _DIGEST_BYTES:
                    return
                answer = bytes(buffer[:_DIGEST_BYTES])
                del buffer[:_DIGEST_BYTES]
                if not hmac.compare_digest(answer, _answer(self.secret, self.nonce)):
                    self.transport.close()  # nothing is unpickled before this check passes
                    return
                self.nonce = None
                continue
            if len(buffer) < _HEADER.size:
                return
            (size,) = _HEADER.unpack_from(buffer)
            end = _HEADER.size + size
            if len(buffer) < end:
                return
            request = bytes(buffer[_HEADER.size : end])
            del buffer[:end]
            reply = self.handle(request)
            if isinstance(reply, bytes):
                self._send(reply)
            else:
                self.waiting = asyncio.ensure_future(reply)
                self.waiting.add_done_callback(self._replied)

    def _replied(self, waiting: asyncio.Future) -> None:
        self.waiting = None
        if self.transport.is_closing():
            return
        if waiting.cancelled() or waiting.exception() is not None:
            self.transport.close()
            return
        self._send(waiting.result())
        self._answer_frames()

    def _send(self, reply: bytes) -> None:
        self.transport.write(_HEADER.pack(len(reply)) + reply)


# -------------------------------------------------------------------------------------- client
class UnitChannel:
    """Connections from this process to every unit of a store, one set per thread.

    ``call(requests)`` sends every request before reading any reply, so the units work on a
    batch in parallel. Pickling a channel (a client shipped to a Ray worker) drops its
    connections; they are opened again, lazily, in the receiving process.
    """

    def __init__(self, addresses: list[tuple[str, int]], secret: bytes):
        self.addresses = [tuple(a) for a in addresses]
        self.secret = secret
        self._local = threading.local()
        self._pid = os.getpid()

    def __getstate__(self) -> dict:
        return {"addresses": self.addresses, "secret": self.secret}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["addresses"], state["secret"])

    def call(
        self, requests: list[tuple[int, bytes]], meanwhile: Callable[[], None] | None = None
    ) -> list[bytes]:
        """Send ``(unit, payload)`` requests, run ``meanwhile()`` while the units work on them, and
        return the replies' payloads, in order (read even when ``meanwhile`` raises, so the
        connections stay in step)."""
        conns = self._connections()
        units = [u for u, _ in requests]
        try:
            for unit, payload in requests:
                conn = conns[unit] or self._connect(conns, unit)
                conn.sendall(_HEADER.pack(len(payload)) + payload)
            try:
                if meanwhile is not None:
                    meanwhile()
            finally:
                replies = [_recv(conns[unit]) for unit in units]
        except OSError as err:
            # The stream's state is unknown after a failure: start over with fresh connections.
            self.close()
            raise KVStoreClosedError(
                f"a storage unit of the KV store is gone (the store was shut down or the unit died): "
                f"lost the connection to unit(s) {sorted(set(units))} ({type(err).__name__}: {err})."
            ) from None
        return replies

    def close(self) -> None:
        """Close this thread's connections."""
        for conn in getattr(self._local, "conns", None) or []:
            if conn is not None:
                conn.close()
        self._local.conns = None

    def _connections(self) -> list[socket.socket | None]:
        if self._pid != os.getpid():  # a forked child must not share its parent's streams
            self.__init__(self.addresses, self.secret)
        conns = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = [None] * len(self.addresses)
        return conns

    def _connect(self, conns: list, unit: int) -> socket.socket:
        host, port = self.addresses[unit]
        conn = socket.create_connection((host, port))
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        nonce = _recv_exactly(conn, _NONCE_BYTES)
        conn.sendall(_answer(self.secret, nonce))
        conns[unit] = conn
        return conn


def _recv(conn: socket.socket) -> bytes:
    (size,) = _HEADER.unpack(_recv_exactly(conn, _HEADER.size))
    return _recv_exactly(conn, size)


def _recv_exactly(conn: socket.socket, size: int) -> bytes:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = conn.recv_into(view[got:])
        if n == 0:
            raise ConnectionResetError("the storage unit closed the connection")
        got += n
    return bytes(buf) if size < 4096 else buf
