"""STOMP over TCP: an asyncio protocol that feeds a ``StompSession`` and batches its writes."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl

from waystation.core.engine import Engine
from waystation.gateway.stomp.session import StompOptions, StompSession

log = logging.getLogger("waystation.stomp")

FLUSH_AT = 64 * 1024  # bytes buffered before a write is flushed without waiting for the loop


class StompProtocol(asyncio.Protocol):
    """The ``Link`` for a TCP connection: writes made during one loop turn go out together."""

    def __init__(
        self, engine: Engine, options: StompOptions, connections: set[StompProtocol]
    ) -> None:
        self.engine = engine
        self.options = options
        self.connections = connections
        self.transport: asyncio.Transport | None = None
        self.session: StompSession | None = None
        self.peer = "?"
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self._closing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.connections.add(self)
        self.session = StompSession(self.engine, self, self.options)

    def data_received(self, data: bytes) -> None:
        assert self.session is not None
        self.session.data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
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
    ) -> None:
        self.engine = engine
        self.host = host
        self.port = port
        self.options = options
        self.tls = tls
        self.connections: set[StompProtocol] = set()
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(
            lambda: StompProtocol(self.engine, self.options, self.connections),
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
