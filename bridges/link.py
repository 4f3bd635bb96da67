"""What a bridge needs from the connection to its remote, whatever the protocol.

A core bridge (and the outbound foreign bridge) keeps one copy of its logic (window, ordered
resends, confirm-after-fsync, dead-letter reasons, in-doubt) and talks to the remote through
this small surface; ``StompLink`` (SEND + receipt) and ``AmqpLink`` (unsettled transfer +
``accepted``) implement it; ``redial.open_link`` picks one by the url's scheme.

* ``encode(msg, confirm_id, forwarding_address, duplicate_id)``: the bytes that forward
  ``msg``; the bridge caches them per ``encoding`` for resends.
* ``forward(confirm_id, payload)``: send them; the answer comes back as
  ``on_confirmed(confirm_id)`` once the remote stored it (on disk for a durable message), or
  ``on_refused(confirm_id | None, text, reason)``: ``reason`` is the dead-letter reason of a
  permanent refusal, None for a transient one; ``confirm_id`` None when the remote did not
  say which message it refused.  ``refusal_ends_link`` says whether a refusal also ends the
  connection (STOMP: ERROR closes it; AMQP: a rejected transfer does not).
* ``write_buffer_size()`` / ``drain()`` for backpressure, ``closed`` (a future resolving with
  the reason the link ended), ``close(reason)``, ``wait_closed()``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from waystation.wire.stomp import Limits

if TYPE_CHECKING:
    from waystation.bridges.dial import Target
    from waystation.core.message import Message

AMQP_SCHEMES = ("amqp", "amqps")

Confirmed = Callable[[str], None]
Refused = Callable[[str | None, str, str | None], None]


class MessageTooLarge(ValueError):
    """``BridgeLink.encode``: the remote could not read this message (dead-letter it as
    message-too-large rather than lose the link on it, again on every resend)."""


class ConnectRefused(Exception):
    """The remote refused the connection (STOMP ERROR to CONNECT, AMQP SASL or open refused)."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message + (f" ({detail})" if detail else ""))
        self.message = message
        self.detail = detail


@dataclass(frozen=True, slots=True)
class LinkOptions:
    login: str | None = None
    passcode: str | None = None
    heartbeat: float = 10.0  # seconds; 0 = no heart-beats
    liveness: float = 30.0  # seconds of input silence before the link is dead; 0 = never
    connect_timeout: float = 30.0
    client_id: str | None = None
    # a link between Waystation nodes: the node name this side claims (``ws-node`` in
    # CONNECT or the AMQP open's properties), and the one the remote must answer with
    node: str | None = None
    expect_node: str | None = None
    limits: Limits = Limits(max_frame_size=64 * 1024 * 1024, max_body_size=64 * 1024 * 1024)
    # AMQP: the sender's target address; None uses the anonymous relay (each message's ``to``)
    amqp_target: str | None = None
    # AMQP inbound (foreign): the source address to receive from instead of sending
    amqp_source: str | None = None


class BridgeLink(Protocol):
    target: Target
    closed: asyncio.Future[str]
    on_confirmed: Confirmed
    on_refused: Refused

    @property
    def encoding(self) -> str: ...

    @property
    def refusal_ends_link(self) -> bool: ...

    def encode(
        self,
        msg: Message,
        confirm_id: str,
        forwarding_address: str | None,
        duplicate_id: str | None,
    ) -> bytes: ...

    def forward(self, confirm_id: str, payload: bytes) -> None: ...

    def write_buffer_size(self) -> int: ...

    async def drain(self) -> None: ...

    def close(self, reason: str = "closed") -> None: ...

    async def wait_closed(self, grace: float = 1.0) -> None: ...


def _ignore_confirmed(confirm_id: str) -> None:
    return None


def _ignore_refused(confirm_id: str | None, text: str, reason: str | None) -> None:
    return None


__all__ = [
    "AMQP_SCHEMES",
    "BridgeLink",
    "ConnectRefused",
    "LinkOptions",
]
