"""One aiohttp listener that every HTTP-borne feature mounts its routes on.

Each feature module has ``setup(app, ctx)``: it adds its routes and registers its own
start and stop work on the app's signals, so this module knows none of them in detail.
The features import what they share from :mod:`.context`, never this module, so there is
no import cycle between the listener and what it mounts.  A node builds it through
:mod:`.ops.front`, on the first request that is not a probe (or at start when REST has
stored work), and hands it connections the front accepted.

A request aiohttp cannot parse is logged as one INFO line (:meth:`GuardedHandler.log_exception`),
not as aiohttp's ERROR with a traceback, which any client could repeat at line rate.

Limits at the door (see docs/security.md), which aiohttp does not have:

- ``max_connections`` / ``max_connections_per_address`` and the process's socket budget
  (:mod:`waystation.gateway.admission`): a connection beyond them gets ``503`` naming the
  limit, written at once, and is closed;
- ``header_timeout``: a connection must complete a request's headers within it, counted
  from connecting (a socket that sends nothing) or from the first byte of a request after
  the previous one ended (slowloris); else ``408`` naming ``header_timeout`` and closed.
  While a request is being handled (a long poll, a WebSocket) no such timer runs.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler
from aiohttp.web_protocol import RequestHandler

from waystation.gateway.admission import Admission, peer_host
from waystation.gateway.http import admin, ops, rest, sockjs, tunnel
from waystation.gateway.http.context import CONTEXT, HttpContext, read_body
from waystation.gateway.http.ops.lag import LoopLag
from waystation.gateway.http.ops.probes import header_timeout_response, plain_response
from waystation.gateway.stomp.session import SERVER_NAME
from waystation.gateway.websocket import streams

log = logging.getLogger("waystation.http")


class GuardedHandler(RequestHandler):
    """aiohttp's connection handler with admission and a header deadline."""

    def __init__(self, guard: Guard, manager: web.Server, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.guard = guard
        self.host = "?"
        self.admitted = False
        self.refused = False
        self.in_request = 0
        self.header_timer: asyncio.TimerHandle | None = None
        self.raw: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.host = peer_host(transport.get_extra_info("peername"))
        why = self.guard.admission.admit(self.host)
        if why is not None:
            self.refused = True
            t: Any = transport
            t.write(plain_response("503 Service Unavailable", why))
            t.close()
            return
        self.admitted = True
        self.raw = transport  # type: ignore[assignment]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return
        if not self.in_request and self.header_timer is None:
            self._arm()  # the first bytes of the next request: headers are due
        super().data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.refused:
            return
        self._disarm()
        if self.admitted:
            self.admitted = False
            self.guard.admission.release(self.host)
        super().connection_lost(exc)

    def log_exception(self, *args: Any, **kw: Any) -> None:
        """aiohttp logs a request it could not parse (a bad request line, header or chunk:
        the client's bytes, answered 400) at ERROR with a traceback, so any client could
        flood the log with them: one INFO line instead, as other protocols' refusals get.
        Everything else (a handler's bug) is still logged with its traceback."""
        exc = kw.get("exc_info")
        if isinstance(exc, HttpProcessingError):
            log.info("HTTP %s: malformed request refused: %.200r", self.host, exc.message)
            return
        super().log_exception(*args, **kw)

    # -- the header deadline ---------------------------------------------------------------
    def request_started(self) -> None:
        self.in_request += 1
        self._disarm()

    def request_ended(self) -> None:
        self.in_request -= 1

    def _arm(self) -> None:
        timeout = self.guard.header_timeout
        if timeout > 0 and self.header_timer is None:
            loop = asyncio.get_running_loop()
            self.header_timer = loop.call_later(timeout, self._expired)

    def _disarm(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _expired(self) -> None:
        self.header_timer = None
        t = self.raw
        if self.in_request or t is None or t.is_closing():
            return
        timeout = self.guard.header_timeout
        self.guard.timed_out += 1
        log.debug("HTTP %s: request headers not complete within %gs", self.host, timeout)
        t.write(header_timeout_response(timeout))
        t.close()


class Guard:
    """The listener's admission and header deadline, and the protocol factory using them."""

    def __init__(self, ctx: HttpContext, admission: Admission | None = None) -> None:
        cfg = ctx.cfg
        self.admission = admission or Admission(
            "HTTP", cfg.max_connections, cfg.max_connections_per_address
        )
        self.header_timeout = cfg.header_timeout.total_seconds()
        self.timed_out = 0

    def factory(self, server: web.Server) -> Any:
        kwargs = server._kwargs  # what AppRunner would have given RequestHandler

        def make() -> GuardedHandler:
            return GuardedHandler(self, server, loop=asyncio.get_running_loop(), **kwargs)

        return make


@web.middleware
async def _in_request(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Tell the connection a request's headers are complete (and when it is over)."""
    proto = request.protocol
    if not isinstance(proto, GuardedHandler):
        return await handler(request)
    proto.request_started()
    try:
        return await handler(request)
    finally:
        proto.request_ended()


class GuardedSite(web.TCPSite):
    """A TCPSite whose connections go through :class:`GuardedHandler`."""

    def __init__(self, runner: web.AppRunner, guard: Guard, **kwargs: Any) -> None:
        super().__init__(runner, **kwargs)
        self.guard = guard

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        self._server = await loop.create_server(
            self.guard.factory(server),
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port

    def bound_port(self) -> int:
        return int(self._bound_port or self._port)


async def _server_header(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["Server"] = SERVER_NAME


class HttpServer:
    def __init__(
        self,
        ctx: HttpContext,
        host: str,
        port: int,
        tls: ssl.SSLContext | None = None,
        admission: Admission | None = None,
        lag: LoopLag | None = None,
    ) -> None:
        """``admission`` and ``lag``: the port's own when a front (:mod:`.ops.front`)
        accepted connections before this application existed."""
        self.ctx = ctx
        self.host = host
        self.port = port
        self.tls = tls
        cfg = ctx.cfg
        self.guard = Guard(ctx, admission)
        self.app = web.Application(  # the tunnel and SockJS enforce their own limits
            client_max_size=max(
                cfg.rest.max_body_size, cfg.tunnel.max_request_size, cfg.sockjs.max_send_size
            ),
            middlewares=[_in_request],
        )
        self.app[CONTEXT] = ctx
        self.app.on_response_prepare.append(_server_header)
        if cfg.rest.enabled:
            rest.setup(self.app, ctx)
        if cfg.websocket.enabled:
            streams.setup(self.app, ctx)
        if cfg.tunnel.enabled:
            tunnel.setup(self.app, ctx)
        if cfg.sockjs.enabled:
            sockjs.setup(self.app, ctx)
        ops.setup(self.app, ctx, lag)  # /health, /ready, /metrics
        admin.setup(self.app, ctx)  # /admin/api/v1
        self.runner: web.AppRunner | None = None
        self.site: HttpSite | None = None

    async def start(self) -> None:
        await self.prepare()
        self.site = await self.add_site(self.host, self.port, self.tls)

    async def prepare(self) -> None:
        """Run the application's start-up work, without opening a port."""
        self.runner = web.AppRunner(
            self.app,
            access_log=None,
            handle_signals=False,
            shutdown_timeout=2.0,
            keepalive_timeout=self.ctx.cfg.keepalive_timeout.total_seconds(),
        )
        await self.runner.setup()

    def protocol_factory(self) -> Any:
        """A new connection's handler (admission, header deadline, the application)."""
        assert self.runner is not None and self.runner.server is not None, "prepare() first"
        return self.guard.factory(self.runner.server)

    async def add_site(self, host: str, port: int, tls: ssl.SSLContext | None) -> HttpSite:
        """One more port on this server's application (``[[acceptors.http.extra]]``), so
        every HTTP listener shares one REST state, push delivery and admission count."""
        assert self.runner is not None, "the server starts first"
        site = GuardedSite(
            self.runner,
            self.guard,
            host=host,
            port=port,
            ssl_context=tls,
            reuse_address=True,
            backlog=1024,
        )
        await site.start()
        log.info(
            "HTTP listening on %s://%s:%d", "https" if tls else "http", host, site.bound_port()
        )
        return HttpSite(self, site)

    def bound_port(self) -> int:
        if self.runner is not None and self.runner.addresses:
            return int(self.runner.addresses[0][1])
        return self.port

    async def stop(self) -> None:
        """Close WebSockets, long polls and tunnel sessions (on_shutdown), then the port."""
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


class HttpSite:
    """A port of an :class:`HttpServer`, listed with the node's listeners; the server's
    own stop closes every site, so this one closes only if it is still up."""

    def __init__(self, server: HttpServer, site: GuardedSite) -> None:
        self.server = server
        self.site = site

    def bound_port(self) -> int:
        return self.site.bound_port()

    async def stop(self) -> None:
        runner = self.server.runner
        if runner is not None and self.site in runner.sites:
            await self.site.stop()


__all__ = ["CONTEXT", "GuardedHandler", "HttpContext", "HttpServer", "HttpSite", "read_body"]
