"""STOMP over TCP: an asyncio protocol that feeds a ``StompSession`` and batches its writes.

Limits at the door (see docs/security.md): a connection over ``max_connections`` (or
``max_connections_per_address``, or the process's socket budget) gets an ERROR frame naming
the limit and is closed before any session exists; one that has not completed CONNECT
within ``connect_timeout`` gets an ERROR naming ``connect_timeout`` and is closed, so idle
sockets cannot hold places (or file descriptors) for ever.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from waystation.core.engine import Engine
from waystation.gateway.admission import Admission, connect_deadline, peer_host, peer_text
from waystation.gateway.stomp.session import StompOptions, StompSession
from waystation.wire.stomp import encode_frame

if TYPE_CHECKING:
    from waystation.config.listeners import StompAcceptor

log = logging.getLogger("waystation.stomp")

FLUSH_AT = 64 * 1024  # bytes buffered before a write is flushed without waiting for the loop


@dataclass(frozen=True, slots=True)
class ListenerLimits:
    """``[acceptors.stomp]`` limits at the door (defaults as in the config)."""

    connect_timeout: float = 10.0  # seconds to complete CONNECT; 0: no limit
    max_connections: int = 10000
    max_connections_per_address: int = 1000  # 0: no limit

    @classmethod
    def of(cls, acceptor: StompAcceptor) -> ListenerLimits:
        return cls(
            acceptor.connect_timeout.total_seconds(),
            acceptor.max_connections,
            acceptor.max_connections_per_address,
        )


def refusal_frame(why: str) -> bytes:
    """An ERROR frame (STOMP 1.0 encoding: no version was agreed) saying why."""
    return encode_frame(
        "ERROR", {"message": why, "content-type": "text/plain"}, why.encode(), "1.0"
    )


class StompProtocol(asyncio.Protocol):
    """The ``Link`` for a TCP connection: writes made during one loop turn go out together."""

    def __init__(
        self,
        engine: Engine,
        options: StompOptions,
        connections: set[StompProtocol],
        admission: Admission | None = None,
        connect_timeout: float = 0.0,
    ) -> None:
        self.engine = engine
        self.options = options
        self.connections = connections
        self.admission = admission
        self.connect_timeout = connect_timeout
        self.transport: asyncio.Transport | None = None
        self.session: StompSession | None = None
        self.peer = "?"
        self.host = "?"
        self._admitted = False
        self._connect_timer: asyncio.TimerHandle | None = None
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self._closing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        t = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.transport = t
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        peer = transport.get_extra_info("peername")
        self.peer = peer_text(peer)
        self.host = peer_host(peer)
        if self.admission is not None:
            why = self.admission.admit(self.host)
            if why is not None:
                t.write(refusal_frame(why))
                t.close()
                return
            self._admitted = True
        self.connections.add(self)
        self.session = StompSession(self.engine, self, self.options)
        self._connect_timer = connect_deadline(self.session, self.connect_timeout)

    def data_received(self, data: bytes) -> None:
        if self.session is not None:
            self.session.data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        if self._connect_timer is not None:
            self._connect_timer.cancel()
            self._connect_timer = None
        if self._admitted and self.admission is not None:
            self._admitted = False
            self.admission.release(self.host)
        if self.session is not None:
            self.session.connection_lost()

    def pause_writing(self) -> None:
        if self.session is not None:
            self.session.pause_writing()

    def resume_writing(self) -> None:
        if self.session is not None:
            self.session.resume_writing()

    # -- Link ----------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        self._out.append(data)
        self._out_bytes += len(data)
        if self._out_bytes > FLUSH_AT:
            # hand a big batch to the transport now: if its buffer is full it calls
            # pause_writing at once, which pauses our consumers mid-dispatch
            self._flush()
            return
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        if not out or self.transport is None:
            return
        self._out = []
        self._out_bytes = 0
        if not self.transport.is_closing():
            self.transport.write(b"".join(out) if len(out) > 1 else out[0])
        if self._closing:
            self.transport.close()

    def close(self) -> None:
        self._closing = True
        if self._out:
            if not self._flush_scheduled:
                self._flush_scheduled = True
                asyncio.get_running_loop().call_soon(self._flush)
        elif self.transport is not None:
            self.transport.close()

    def pause_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()


class StompServer:
    def __init__(
        self,
        engine: Engine,
        host: str,
        port: int,
        options: StompOptions,
        tls: ssl.SSLContext | None = None,
        limits: ListenerLimits | None = None,
    ) -> None:
        self.engine = engine
        self.host = host
        self.port = port
        self.options = options
        self.tls = tls
        self.limits = limits or ListenerLimits()
        self.admission = Admission(
            "STOMP", self.limits.max_connections, self.limits.max_connections_per_address
        )
        self.connections: set[StompProtocol] = set()
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        timeout = self.limits.connect_timeout
        self.server = await loop.create_server(
            lambda: StompProtocol(
                self.engine, self.options, self.connections, self.admission, timeout
            ),
            self.host,
            self.port,
            reuse_address=True,
            backlog=1024,
            ssl=self.tls,
        )
        scheme = "tls" if self.tls else "tcp"
        log.info("STOMP listening on %s://%s:%d", scheme, self.host, self.port)

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for c in list(self.connections):
            if c.session is not None:
                c.session.close()
        if self.server is not None:
            await self.server.wait_closed()
