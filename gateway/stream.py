"""A stream protocol over TCP (or TLS): an asyncio protocol that feeds one session and
batches its writes.  Every adapter's listener is one of these (see ``gateway/adapter.py``).

Limits at the door (see docs/security.md): a connection over ``max_connections`` (or
``max_connections_per_address``, or the process's socket budget) is sent the adapter's
refusal naming the limit and is closed before any session exists; one that has not logged
in within ``connect_timeout`` is failed by its session (an error naming ``connect_timeout``)
and closed, so idle sockets cannot hold places (or file descriptors) for ever.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from waystation.gateway.adapter import StreamSession
from waystation.gateway.admission import Admission, connect_deadline, peer_host, peer_text
from waystation.gateway.link import Link
from waystation.gateway.listen import bound_socket

log = logging.getLogger("waystation.stream")

FLUSH_AT = 64 * 1024  # bytes buffered before a write is flushed without waiting for the loop
# After the node ends a connection (an ERROR, a refusal, a DISCONNECT), it half-closes and reads
# (dropping it) what the peer still sends for this long: closing with unread bytes would send a
# TCP reset, and the reset can destroy the error frame before the client has read it.
LINGER = 2.0


@dataclass(frozen=True, slots=True)
class ListenerLimits:
    """An acceptor's limits at the door (defaults as in the config)."""

    connect_timeout: float = 10.0  # seconds to complete CONNECT; 0: no limit
    max_connections: int = 10000
    max_connections_per_address: int = 1000  # 0: no limit

    @classmethod
    def of(cls, acceptor: Any) -> ListenerLimits:
        return cls(
            acceptor.connect_timeout.total_seconds(),
            acceptor.max_connections,
            acceptor.max_connections_per_address,
        )


class StreamProtocol(asyncio.Protocol):
    """The ``Link`` for a TCP connection: writes made during one loop turn go out together."""

    def __init__(
        self,
        open_session: Callable[[Link], StreamSession],
        connections: set[StreamProtocol],
        admission: Admission | None = None,
        connect_timeout: float = 0.0,
        refusal: Callable[[str], bytes] = lambda why: b"",
    ) -> None:
        self.open_session = open_session
        self.refusal = refusal
        self.connections = connections
        self.admission = admission
        self.connect_timeout = connect_timeout
        self.transport: asyncio.Transport | None = None
        self.session: StreamSession | None = None
        self.peer_certificate: dict[str, Any] | None = None  # TLS client certificate
        self.peer = "?"
        self.host = "?"
        self._admitted = False
        self._connect_timer: asyncio.TimerHandle | None = None
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self._closing = False
        self._linger: asyncio.TimerHandle | None = None  # set once our side is half-closed
        # kept: asyncio.get_running_loop() calls getpid(), a system call, each time
        self._loop: asyncio.AbstractEventLoop | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        t = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.transport = t
        self._loop = asyncio.get_running_loop()
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
                t.write(self.refusal(why))
                t.close()
                return
            self._admitted = True
        self.peer_certificate = transport.get_extra_info("peercert") or None
        self.connections.add(self)
        self.session = self.open_session(self)
        self._connect_timer = connect_deadline(self.session, self.connect_timeout)

    def data_received(self, data: bytes) -> None:
        if self.session is not None and not self._closing:
            self.session.data_received(data)

    def logged_in(self) -> None:
        """The session completed its login: the connect deadline (and what its timer keeps
        alive) is no longer needed."""
        if self._connect_timer is not None:
            self._connect_timer.cancel()
            self._connect_timer = None

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        if self._linger is not None:
            self._linger.cancel()
        if self._connect_timer is not None:
            self._connect_timer.cancel()
            self._connect_timer = None
        if self._admitted and self.admission is not None:
            self._admitted = False
            self.admission.release(self.host)
        # the session and this protocol refer to each other: dropping our side frees both
        # (and the parser's partial packet) now, not at the next cyclic GC (gc_policy.py)
        session, self.session = self.session, None
        if session is not None:
            session.connection_lost()

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
            (self._loop or asyncio.get_running_loop()).call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        if not out or self.transport is None:
            return
        self._out = []
        self._out_bytes = 0
        if self._linger is None and not self.transport.is_closing():
            self.transport.write(b"".join(out) if len(out) > 1 else out[0])
        if self._closing:
            self._end()

    def close(self) -> None:
        self._closing = True
        if self._out:
            if not self._flush_scheduled:
                self._flush_scheduled = True
                (self._loop or asyncio.get_running_loop()).call_soon(self._flush)
        elif self.transport is not None:
            self._end()

    def _end(self) -> None:
        """Half-close and linger (see LINGER); over TLS, which cannot half-close, close."""
        t = self.transport
        if t is None or t.is_closing() or self._linger is not None:
            return
        if not t.can_write_eof():
            t.close()
            return
        t.write_eof()
        t.resume_reading()
        self._linger = asyncio.get_running_loop().call_later(LINGER, t.abort)

    def end_lingering(self) -> None:
        """Close now, without waiting for the peer (the node is stopping)."""
        if self._linger is not None and self.transport is not None:
            self._linger.cancel()
            self.transport.close()

    def pause_reading(self) -> None:
        if self._closing:  # what still comes is read and dropped
            return
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()


class StreamServer:
    """One listener: every accepted connection gets a session from ``open_session``."""

    def __init__(
        self,
        name: str,
        open_session: Callable[[Link], StreamSession],
        host: str,
        port: int,
        tls: ssl.SSLContext | None = None,
        limits: ListenerLimits | None = None,
        refusal: Callable[[str], bytes] = lambda why: b"",
    ) -> None:
        self.name = name
        self.open_session = open_session
        self.host = host
        self.port = port
        self.tls = tls
        self.refusal = refusal
        self.limits = limits or ListenerLimits()
        self.admission = Admission(
            name.upper(), self.limits.max_connections, self.limits.max_connections_per_address
        )
        self.connections: set[StreamProtocol] = set()
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        timeout = self.limits.connect_timeout

        def protocol() -> StreamProtocol:
            return StreamProtocol(
                self.open_session, self.connections, self.admission, timeout, self.refusal
            )

        sock = bound_socket(self.host, self.port)
        if sock is not None:
            self.server = await loop.create_server(protocol, sock=sock, ssl=self.tls)
        else:
            self.server = await loop.create_server(
                protocol, self.host, self.port, reuse_address=True, backlog=1024, ssl=self.tls
            )
        scheme = "tls" if self.tls else "tcp"
        log.info("%s listening on %s://%s:%d", self.name.upper(), scheme, self.host, self.port)

    def bound_port(self) -> int:
        assert self.server is not None and self.server.sockets
        return int(self.server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for c in list(self.connections):
            if c.session is not None:
                c.session.close()
        await asyncio.sleep(0)  # the sessions' last frames are flushed
        for c in list(self.connections):
            c.end_lingering()
        if self.server is not None:
            await self.server.wait_closed()


__all__ = ["FLUSH_AT", "ListenerLimits", "StreamProtocol", "StreamServer"]
