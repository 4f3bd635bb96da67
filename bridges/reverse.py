"""The dialling side of a link that goes both ways (``[[bridges]] direction = "both"``).

After CONNECT the link subscribes with ``ws-link`` and the remote forwards, over the same
connection, what waits there for this node (its ``sf.<this node>``, through its "accept"
bridge).  Each MESSAGE is routed here as a bridge SEND would be on the remote (same header
mapping, so typed properties, trace id and the remote's stable duplicate id arrive intact;
the duplicate cache drops a resend) and ACKed only once stored (on disk when durable) and
once its address takes more (a BLOCK-ed address holds the ACK, so the remote's window stops
it).  A message this node refuses for good is NACKed with the dead-letter reason; a passing
refusal (store trouble, a full address) ends the link, so the remote resends it, in order,
on the next one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from waystation.bridges.reasons import classify_error
from waystation.bridges.stomp_link import StompLink
from waystation.core.limits import LimitExceeded
from waystation.core.message import now_ms
from waystation.core.postoffice import AddressFull, RoutingError
from waystation.core.security import NotAuthorized
from waystation.core.session import Session, SessionError
from waystation.gateway.stomp.destinations import parse_destination
from waystation.gateway.stomp.mapping import REASON_HEADER, message_from_send
from waystation.wire.stomp import Frame

log = logging.getLogger("waystation.bridge")

# headers of the MESSAGE frame itself, not of the message it carries
_FRAME_HEADERS = frozenset(("subscription", "message-id", "ack", "redelivered"))
_REFUSALS: tuple[tuple[type[Exception], str], ...] = (
    (AddressFull, "address full"),
    (RoutingError, "unknown destination"),
    (NotAuthorized, "not authorized"),
    (LimitExceeded, "limit exceeded"),
    (SessionError, "internal error (session closed)"),
    (ValueError, "invalid message"),
)


class ReverseReceiver:
    def __init__(
        self, name: str, session: Session, link: StompLink, ids: Callable[[], int]
    ) -> None:
        self.name = name
        self.session = session
        self.link = link
        self.ids = ids
        self.received = 0

    def start(self) -> None:
        self.link.open_reverse(self.on_message)

    def on_message(self, frame: Frame) -> None:
        h = frame.headers
        ack = h.get("ack")
        if not ack:
            self.link.close("protocol error from remote: a MESSAGE without ack on a two-way link")
            return
        session = self.session
        try:
            address, routing = parse_destination(h.get("destination", ""))
            headers = {k: v for k, v in h.items() if k not in _FRAME_HEADERS}
            msg = message_from_send(self.ids(), address, headers, frame.body, now_ms())
            stored = session.send(msg, routing=routing)
        except tuple(e for e, _ in _REFUSALS) as e:
            what = next(w for t, w in _REFUSALS if isinstance(e, t))
            self._refused(ack, f"{what}: {e}")
            return
        self.received += 1
        waits = [f for f in (stored, session.blocked(address)) if f is not None]
        if not waits:
            self._ack(ack)
            return
        done = asyncio.gather(*waits) if len(waits) > 1 else waits[0]
        done.add_done_callback(lambda f: self._settled(ack, f))

    def _settled(self, ack: str, f: asyncio.Future[Any]) -> None:
        if f.cancelled() or f.exception() is not None:
            # not stored, or we cannot tell: the remote resends it (a stored copy is dropped
            # then as a duplicate)
            self.link.close(f"store failure: {'cancelled' if f.cancelled() else f.exception()}")
            return
        self._ack(ack)

    def _ack(self, ack: str) -> None:
        self.link.send_frame("ACK", {"id": ack})

    def _refused(self, ack: str, text: str) -> None:
        reason = classify_error(text)
        if reason is None:
            self.link.close(f"cannot take a message from the remote now: {text}")
            return
        log.warning(
            "bridge %s: refused a message from the remote (%s): %s", self.name, reason, text
        )
        self.link.send_frame("NACK", {"id": ack, REASON_HEADER: reason, "message": text})


__all__ = ["ReverseReceiver"]
