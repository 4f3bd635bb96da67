"""What every HTTP feature shares, in a module of its own so that the features and the
listener that mounts them (:mod:`.server`) do not import each other."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from waystation.core.engine import Engine
from waystation.gateway.stomp.session import StompOptions

if TYPE_CHECKING:
    from waystation.config.listeners import HttpAcceptor
    from waystation.gateway.adapter import ProtocolAdapter, SessionOpener


class BridgeControl(Protocol):
    """What the node's bridge manager offers the admin API (KeyError for an unknown name)."""

    def pause(self, name: str) -> Any: ...

    def resume(self, name: str) -> Any: ...


@dataclass(slots=True)
class HttpContext:
    """What the HTTP features share: the engine, their config, STOMP session options (for
    SockJS) and how to open a session of each stream protocol (WebSocket and the tunnel)."""

    engine: Engine
    cfg: HttpAcceptor
    stomp: StompOptions
    data_dir: Path | None  # None: persistence off (durable push registrations kept in memory)
    # a new session of each stream protocol, by adapter name (WebSocket and tunnel carry them)
    sessions: dict[str, SessionOpener] = field(default_factory=dict)
    adapters: dict[str, ProtocolAdapter] = field(default_factory=dict)
    # store recovered, every listener accepting, not stopping (GET /ready)
    ready: Callable[[], bool] | None = None
    bridges: Callable[[], list[dict[str, object]]] | None = None  # each bridge's status
    reload: Callable[[], Awaitable[list[str]]] | None = None  # the config file again (changes)
    bridge_control: BridgeControl | None = None  # pause and resume bridges


CONTEXT = web.AppKey("context", HttpContext)
log = logging.getLogger("waystation.http")


async def read_body(request: web.Request, limit: int) -> bytes | None:
    """The request body, or None when it is over ``limit`` bytes (from Content-Length, or
    while a chunked body is read).  aiohttp's ``client_max_size`` is one limit for the
    whole app; this lets each route keep its own, smaller one.

    A body cut short (the client went away) or malformed (chunked encoding) is the client's
    doing, not the node's: it raises a 400, which aiohttp answers (or, with the client gone,
    drops) without logging an error and a traceback, as it would for any other exception."""
    if request.content_length is not None and request.content_length > limit:
        return None
    body = bytearray()
    try:
        async for chunk in request.content.iter_any():
            body += chunk
            if len(body) > limit:
                return None
    except ConnectionError:
        log.debug("HTTP %s %s: the client left during the body", request.method, request.path)
        raise web.HTTPBadRequest(text="the request body was cut short\n") from None
    except HttpProcessingError as e:
        raise web.HTTPBadRequest(text=f"malformed request body: {e.message}\n") from None
    return bytes(body)


__all__ = ["CONTEXT", "BridgeControl", "HttpContext", "read_body"]
