"""The node's HTTP port, open from the start, with the web application built on first need.

Why: aiohttp and every HTTP feature (REST, tunnel, WebSocket, SockJS, admin API, console,
metrics) cost about 13 MB resident and a quarter of a second to import, while many nodes
only ever see their probes.  So the port opens at start with a small protocol that answers
``/health`` and ``/ready`` itself (:mod:`.probes`) and, for any other request, builds the
application once (:class:`waystation.gateway.http.server.HttpServer`), then hands it the
connection with the bytes read so far; later connections go to the application directly.
The first such request waits for the build, once.

The application is built at start instead when it has work of its own to resume: stored
REST push registrations (deliveries) or durable REST subscriptions.  Admission (connection
limits) and the header deadline hold before the hand-over as after it, with one count.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from waystation.gateway.admission import Admission, peer_host
from waystation.gateway.http.ops.lag import LoopLag
from waystation.gateway.http.ops.probes import (
    MAX_HEAD,
    answer,
    header_timeout_response,
    parse_probe,
    plain_response,
)
from waystation.gateway.listen import bound_socket

if TYPE_CHECKING:
    from waystation.config.listeners import HttpAcceptor
    from waystation.core.engine import Engine
    from waystation.gateway.http.context import HttpContext
    from waystation.gateway.http.server import HttpServer

log = logging.getLogger("waystation.http")

REST_SUBSCRIPTIONS = "rest-subscriptions"  # gateway/http/rest/substore.py's DIRECTORY


@dataclass(frozen=True, slots=True)
class FrontContext:
    """What the port needs before the application exists; ``context`` makes the
    application's :class:`HttpContext` (its module imports aiohttp, so it waits too)."""

    engine: Engine
    cfg: HttpAcceptor
    data_dir: Path | None
    ready: Callable[[], bool] | None
    context: Callable[[], HttpContext]


def has_stored_rest_work(ctx: FrontContext) -> bool:
    """Whether REST left registrations or subscriptions on disk that start with the app."""
    rest = ctx.cfg.rest
    if not (rest.enabled and ctx.data_dir):
        return False
    for sub in (rest.push_store_dir, REST_SUBSCRIPTIONS):
        folder = Path(ctx.data_dir) / sub
        try:
            if any(folder.iterdir()):
                return True
        except OSError:  # absent: nothing stored
            continue
    return False


class HttpFront:
    """The HTTP listener of a node: same interface as ``HttpServer`` (start, add_site,
    bound_port, stop), its application built by :meth:`app` when first needed."""

    def __init__(
        self, ctx: FrontContext, host: str, port: int, tls: ssl.SSLContext | None = None
    ) -> None:
        cfg = ctx.cfg
        self.ctx = ctx
        self.host, self.port, self.tls = host, port, tls
        self.admission = Admission("HTTP", cfg.max_connections, cfg.max_connections_per_address)
        self.header_timeout = cfg.header_timeout.total_seconds()
        self.keepalive_timeout = cfg.keepalive_timeout.total_seconds()
        self.lag = LoopLag()
        self.server: HttpServer | None = None  # the application, once built
        self.draining = False
        self.waiting: set[FrontProtocol] = set()  # connections not handed over yet
        self._build: asyncio.Future[None] | None = None
        self._sites: list[FrontSite] = []

    async def start(self) -> None:
        self.lag.start()
        if has_stored_rest_work(self.ctx):
            await self.app()
        await self.add_site(self.host, self.port, self.tls)

    def app(self) -> asyncio.Future[None]:
        """Build the application (once; later calls share the first build)."""
        if self._build is None or (self._build.done() and self.server is None):
            self._build = asyncio.ensure_future(self._make())
        return self._build

    async def _make(self) -> None:
        from waystation.gateway.http.server import HttpServer

        server = HttpServer(
            self.ctx.context(),
            self.host,
            self.port,
            self.tls,
            admission=self.admission,
            lag=self.lag,
        )
        await server.prepare()
        self.server = server
        log.info("HTTP application ready")

    def protocol(self) -> asyncio.Protocol:
        """A new connection's protocol: the application's once built, else a front."""
        if self.server is not None:
            made: asyncio.Protocol = self.server.protocol_factory()()
            return made
        return FrontProtocol(self)

    async def add_site(self, host: str, port: int, tls: ssl.SSLContext | None) -> FrontSite:
        """One more port for the same application (``[[acceptors.http.extra]]``)."""
        loop = asyncio.get_running_loop()
        sock = bound_socket(host, port)
        if sock is not None:
            listener = await loop.create_server(self.protocol, sock=sock, ssl=tls)
        else:
            listener = await loop.create_server(
                self.protocol, host, port, ssl=tls, reuse_address=True, backlog=1024
            )
        site = FrontSite(self, listener, port)
        self._sites.append(site)
        scheme = "https" if tls else "http"
        log.info("HTTP listening on %s://%s:%d", scheme, host, site.bound_port())
        return site

    def bound_port(self) -> int:
        return self._sites[0].bound_port() if self._sites else self.port

    async def stop(self) -> None:
        """Stop accepting, close connections still at the front, then stop the application
        (which closes WebSockets, long polls and tunnel sessions)."""
        self.draining = True
        for site in self._sites:
            site.close()
        for proto in list(self.waiting):
            proto.close()
        if self._build is not None and not self._build.done():
            await asyncio.wait([self._build])
        if self.server is not None:
            await self.server.stop()
        await self.lag.stop()


class FrontSite:
    """One listening port of a :class:`HttpFront`."""

    def __init__(self, front: HttpFront, listener: asyncio.AbstractServer, port: int) -> None:
        self.front = front
        self.listener = listener
        sockets: Any = getattr(listener, "sockets", None) or ()
        self._port = int(sockets[0].getsockname()[1]) if sockets else port

    def bound_port(self) -> int:
        return self._port

    def close(self) -> None:
        self.listener.close()

    async def stop(self) -> None:
        self.close()


class FrontProtocol(asyncio.Protocol):
    """A connection before the application: probes answered here, the rest handed over."""

    def __init__(self, front: HttpFront) -> None:
        self.front = front
        self.transport: asyncio.Transport | None = None
        self.host = "?"
        self.admitted = False
        self.handing = False  # waiting for the application
        self.eof = False
        self.buf = bytearray()
        self.timer: asyncio.TimerHandle | None = None
        self.timer_is_header = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        t: Any = transport
        self.transport = t
        self.host = peer_host(t.get_extra_info("peername"))
        why = self.front.admission.admit(self.host)
        if why is not None:
            t.write(plain_response("503 Service Unavailable", why))
            t.close()
            return
        self.admitted = True
        self.front.waiting.add(self)
        self._arm(self.front.header_timeout, self._header_expired, header=True)

    def data_received(self, data: bytes) -> None:
        if self.handing:
            self.buf += data  # the application reads it after the hand-over
            return
        if not self.admitted:
            return
        self.buf += data
        if not self.timer_is_header:  # the first bytes of a request after an idle wait
            self._arm(self.front.header_timeout, self._header_expired, header=True)
        self._serve()

    def eof_received(self) -> bool | None:
        if self.handing:
            self.eof = True
            return True  # keep the socket for the application, which sees the EOF
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.front.waiting.discard(self)
        if self.admitted:
            self.admitted = False
            self.front.admission.release(self.host)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _serve(self) -> None:
        t = self.transport
        assert t is not None
        while self.buf:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEAD * 4:
                    self._hand_over()  # the application answers an oversized head
                return
            probe = parse_probe(bytes(self.buf[:end]).lstrip(b"\r\n"))
            if probe is None:
                self._hand_over()
                return
            del self.buf[: end + 4]
            t.write(answer(probe, self.front.ctx, self.front.draining))
            if not probe.keep_alive or self.front.draining:
                t.close()
                return
        self._arm(self.front.keepalive_timeout, self.close, header=False)

    # -- the hand-over ---------------------------------------------------------------------
    def _hand_over(self) -> None:
        assert self.transport is not None
        self._disarm()
        self.handing = True
        self.transport.pause_reading()
        build = self.front.app()
        if build.done():
            self._built(build)
        else:
            build.add_done_callback(self._built)

    def _built(self, build: asyncio.Future[None]) -> None:
        t = self.transport
        if t is None or t.is_closing():
            return
        server = self.front.server
        if server is None:
            if not build.cancelled() and build.exception() is not None:
                log.error("HTTP application failed to start", exc_info=build.exception())
            t.write(plain_response("500 Internal Server Error", "HTTP application not started"))
            t.close()
            return
        self.front.waiting.discard(self)
        self.front.admission.release(self.host)  # the application's handler admits it again
        self.admitted = False
        real: Any = server.protocol_factory()()
        t.set_protocol(real)
        real.connection_made(t)
        if t.is_closing():
            return
        t.resume_reading()
        if self.buf:
            real.data_received(bytes(self.buf))
        if self.eof and not real.eof_received():
            t.close()

    # -- timers ----------------------------------------------------------------------------
    def _arm(self, timeout: float, then: Callable[[], None], header: bool) -> None:
        self._disarm()
        if timeout > 0:
            self.timer = asyncio.get_running_loop().call_later(timeout, then)
            self.timer_is_header = header

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.timer_is_header = False

    def _header_expired(self) -> None:
        self.timer = None
        t = self.transport
        if t is None or t.is_closing() or self.handing:
            return
        timeout = self.front.header_timeout
        t.write(header_timeout_response(timeout))
        t.close()


__all__ = [
    "FrontContext",
    "FrontProtocol",
    "FrontSite",
    "HttpFront",
    "has_stored_rest_work",
]
