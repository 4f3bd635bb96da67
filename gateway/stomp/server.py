"""STOMP over TCP: the stream listener with STOMP sessions and an ERROR frame as refusal."""

from __future__ import annotations

import ssl

from waystation.core.engine import Engine
from waystation.gateway.stomp.session import StompOptions, StompSession
from waystation.gateway.stream import ListenerLimits, StreamServer
from waystation.wire.stomp import encode_frame


def refusal_frame(why: str) -> bytes:
    """An ERROR frame (STOMP 1.0 encoding: no version was agreed) saying why."""
    return encode_frame(
        "ERROR", {"message": why, "content-type": "text/plain"}, why.encode(), "1.0"
    )


def stomp_server(
    engine: Engine,
    host: str,
    port: int,
    options: StompOptions,
    tls: ssl.SSLContext | None = None,
    limits: ListenerLimits | None = None,
) -> StreamServer:
    """A STOMP listener (a function, not a subclass: the compiled build's StreamServer
    cannot be subclassed from Python)."""
    return StreamServer(
        "stomp",
        lambda link: StompSession(engine, link, options),
        host,
        port,
        tls,
        limits,
        refusal_frame,
    )


__all__ = ["ListenerLimits", "refusal_frame", "stomp_server"]
