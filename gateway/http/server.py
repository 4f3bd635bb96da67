"""One aiohttp listener that every HTTP-borne feature mounts its routes on.

Each feature module has ``setup(app, ctx)``: it adds its routes and registers its own
start and stop work on the app's signals, so this module knows none of them in detail.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from waystation.core.engine import Engine
from waystation.gateway.stomp.session import SERVER_NAME, StompOptions

if TYPE_CHECKING:
    from waystation.config.listeners import HttpAcceptor

log = logging.getLogger("waystation.http")


@dataclass(slots=True)
class HttpContext:
    """What the HTTP features share: the engine, their config, and STOMP session options
    (WebSocket, tunnel and SockJS sessions are STOMP sessions like TCP ones)."""

    engine: Engine
    cfg: HttpAcceptor
    stomp: StompOptions
    data_dir: Path | None  # None: persistence off (durable push registrations kept in memory)


CONTEXT = web.AppKey("context", HttpContext)


async def read_body(request: web.Request, limit: int) -> bytes | None:
    """The request body, or None when it is over ``limit`` bytes (from Content-Length, or
    while a chunked body is read).  aiohttp's ``client_max_size`` is one limit for the
    whole app; this lets each route keep its own, smaller one."""
    if request.content_length is not None and request.content_length > limit:
        return None
    body = bytearray()
    async for chunk in request.content.iter_any():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


async def _server_header(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["Server"] = SERVER_NAME


class HttpServer:
    def __init__(
        self, ctx: HttpContext, host: str, port: int, tls: ssl.SSLContext | None = None
    ) -> None:
        from waystation.gateway.http import rest, sockjs, tunnel
        from waystation.gateway.websocket import stomp_ws

        self.ctx = ctx
        self.host = host
        self.port = port
        self.tls = tls
        cfg = ctx.cfg
        self.app = web.Application(  # the tunnel and SockJS enforce their own limits
            client_max_size=max(
                cfg.rest.max_body_size, cfg.tunnel.max_request_size, cfg.sockjs.max_send_size
            )
        )
        self.app[CONTEXT] = ctx
        self.app.on_response_prepare.append(_server_header)
        if cfg.rest.enabled:
            rest.setup(self.app, ctx)
        if cfg.websocket.enabled:
            stomp_ws.setup(self.app, ctx)
        if cfg.tunnel.enabled:
            tunnel.setup(self.app, ctx)
        if cfg.sockjs.enabled:
            sockjs.setup(self.app, ctx)
        self.runner: web.AppRunner | None = None
        self.site: web.TCPSite | None = None

    async def start(self) -> None:
        self.runner = web.AppRunner(
            self.app, access_log=None, handle_signals=False, shutdown_timeout=2.0
        )
        await self.runner.setup()
        self.site = web.TCPSite(
            self.runner,
            self.host,
            self.port,
            ssl_context=self.tls,
            reuse_address=True,
            backlog=1024,
        )
        await self.site.start()
        scheme = "https" if self.tls else "http"
        log.info("HTTP listening on %s://%s:%d", scheme, self.host, self.bound_port())

    def bound_port(self) -> int:
        if self.runner is not None and self.runner.addresses:
            return int(self.runner.addresses[0][1])
        return self.port

    async def stop(self) -> None:
        """Close WebSockets, long polls and tunnel sessions (on_shutdown), then the port."""
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


__all__ = ["CONTEXT", "HttpContext", "HttpServer", "read_body"]
