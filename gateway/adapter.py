"""What a protocol adapter gives the gateway, so TCP, WebSocket and the HTTP tunnel carry it.

A stream protocol (STOMP, AMQP 1.0, MQTT) is a session class fed bytes by whatever carries
them and writing to a :class:`~waystation.gateway.link.Link`.  Each adapter package exports
one :class:`ProtocolAdapter`; ``gateway/adapters.py`` lists them, and the node opens
``[acceptors.<name>]`` for each, the WebSocket path ``/<name>`` and the tunnel's
``protocol=<name>`` from that one entry.  A new protocol adds its package and one line there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from waystation.core.engine import Engine
    from waystation.gateway.link import Link


class StreamSession(Protocol):
    """One connection's protocol state machine (``StompSession`` is one)."""

    connected: bool  # logged in: the listener's connect_timeout stops watching
    closed: bool

    def data_received(self, data: bytes) -> None: ...

    def connection_lost(self) -> None:
        """The peer is gone: release everything, write nothing."""

    def pause_writing(self) -> None:
        """The link's buffer is full: stop delivering until :meth:`resume_writing`."""

    def resume_writing(self) -> None: ...

    def fail(self, message: str, detail: str = "") -> None:
        """Tell the peer what was wrong in the protocol's own way, then close."""

    def close(self) -> None:
        """Close from the server's side (shutdown)."""


SessionOpener = Callable[["Link"], StreamSession]  # a new session for a new connection


def _no_refusal(why: str) -> bytes:
    return b""


@dataclass(frozen=True, slots=True)
class ProtocolAdapter:
    name: str  # acceptors.<name>, the tunnel's protocol=<name>, WebSocket path /<name>
    # a session for one connection: (engine, link, the protocol's acceptor config table)
    new_session: Callable[[Engine, Link, Any], StreamSession]
    # bytes sent to a connection refused at the door (max_connections) before it is closed
    refusal: Callable[[str], bytes] = _no_refusal
    subprotocols: tuple[str, ...] = field(default=())  # WebSocket subprotocols offered
    text_frames: bool = False  # WebSocket: batches that are valid UTF-8 go as text frames
    # once the engine has started (recovered): re-arm what the protocol keeps over restarts
    on_start: Callable[[Engine], object] | None = None


__all__ = ["ProtocolAdapter", "SessionOpener", "StreamSession"]
