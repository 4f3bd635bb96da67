"""Stream protocols the tunnel can carry, by the name a client gives in ``open``.

A protocol is a factory that builds a session fed with ``data_received(bytes)`` and writing
to a :class:`QueuedLink`, exactly as it would over TCP or WebSocket.  STOMP registers here;
AMQP and MQTT add themselves with :func:`register` when they exist.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from waystation.gateway.http.context import HttpContext
from waystation.gateway.queued_link import QueuedLink
from waystation.gateway.stomp.session import StompSession


class StreamSession(Protocol):
    """What the tunnel needs from a protocol session (StompSession has it)."""

    def data_received(self, data: bytes) -> None: ...

    def connection_lost(self) -> None: ...

    def pause_writing(self) -> None: ...

    def resume_writing(self) -> None: ...


Factory = Callable[[HttpContext, QueuedLink], StreamSession]

PROTOCOLS: dict[str, Factory] = {}


def register(name: str, factory: Factory) -> None:
    """Make ``name`` openable over the tunnel (a later registration replaces an earlier)."""
    PROTOCOLS[name] = factory


def known() -> str:
    return ", ".join(sorted(PROTOCOLS))


def _stomp(ctx: HttpContext, link: QueuedLink) -> StreamSession:
    return StompSession(ctx.engine, link, ctx.stomp)


register("stomp", _stomp)

__all__ = ["PROTOCOLS", "Factory", "StreamSession", "known", "register"]
