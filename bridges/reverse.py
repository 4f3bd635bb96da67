"""The dialling side of a link that goes both ways (``[[bridges]] direction = "both"``).

After CONNECT the link subscribes with ``ws-link`` and the remote forwards, over the same
connection, what waits there for this node (its ``sf.<this node>``, through its "accept"
bridge).  Each MESSAGE is routed here as a bridge SEND would be on the remote (same header
mapping, so typed properties, trace id and the remote's stable duplicate id arrive intact;
the duplicate cache drops a resend) and ACKed only once stored (on disk when durable) and
once its address takes more (a BLOCK-ed address holds the ACK, so the remote's window stops
it).  A message this node refuses for good is NACKed with the dead-letter reason; one for a
full address waits here, with those behind it, and is tried again; store trouble ends the
link, so the remote resends it, in order, on the next one.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from waystation.bridges.stomp_link import StompLink
from waystation.core.limits import LimitExceeded
from waystation.core.message import now_ms
from waystation.core.postoffice import AddressFull, RoutingError
from waystation.core.reasons import (
    INVALID_REMOTE_DESTINATION,
    REMOTE_AUTHORIZATION,
    REMOTE_REJECTED,
)
from waystation.core.security import NotAuthorized
from waystation.core.session import Session, SessionError
from waystation.gateway.stomp.destinations import parse_destination
from waystation.gateway.stomp.mapping import REASON_HEADER, message_from_send
from waystation.wire.stomp import Frame

log = logging.getLogger("waystation.bridge")

# headers of the MESSAGE frame itself, not of the message it carries
_FRAME_HEADERS = frozenset(("subscription", "message-id", "ack", "redelivered"))
PARK_RETRY = 0.5  # seconds between tries of a message refused for a full address
# what this node refused, by type: the dead-letter reason, or None (passing: end the link).
# Not classify_error: the text names the address, and "timeout-log" is not a timeout.
_REFUSALS: tuple[tuple[type[Exception], str, str | None], ...] = (
    (RoutingError, "unknown destination", INVALID_REMOTE_DESTINATION),
    (NotAuthorized, "not authorized", REMOTE_AUTHORIZATION),
    (LimitExceeded, "limit exceeded", REMOTE_REJECTED),
    (SessionError, "internal error (session closed)", None),
    (ValueError, "invalid message", REMOTE_REJECTED),
)
_REFUSED = tuple(t for t, _, _ in _REFUSALS)


class ReverseReceiver:
    def __init__(
        self, name: str, session: Session, link: StompLink, ids: Callable[[], int]
    ) -> None:
        self.name = name
        self.session = session
        self.link = link
        self.ids = ids
        # refused for a full address, and everything behind it (in order, un-ACKed: the
        # remote's window stops it); tried again every PARK_RETRY, the link goes on
        self._parked: deque[Frame] = deque()

    def start(self) -> None:
        self.link.open_reverse(self.on_message)

    def on_message(self, frame: Frame) -> None:
        if self._parked:  # behind a message waiting for room: keep the order
            self._parked.append(frame)
        elif not self._take(frame):
            self._parked.append(frame)
            asyncio.get_running_loop().call_later(PARK_RETRY, self._retry)

    def _retry(self) -> None:
        if self.link.closed.done():  # the remote resends them on the next link
            self._parked.clear()
            return
        while self._parked:
            if not self._take(self._parked[0]):
                asyncio.get_running_loop().call_later(PARK_RETRY, self._retry)
                return
            self._parked.popleft()

    def _take(self, frame: Frame) -> bool:
        """Route one MESSAGE (ACK, NACK or end the link); False: its address is full."""
        h = frame.headers
        ack = h.get("ack")
        if not ack:
            self.link.close("protocol error from remote: a MESSAGE without ack on a two-way link")
            return True
        session = self.session
        try:
            address, routing = parse_destination(h.get("destination", ""))
            headers = {k: v for k, v in h.items() if k not in _FRAME_HEADERS}
            msg = message_from_send(self.ids(), address, headers, frame.body, now_ms())
            stored = session.send(msg, routing=routing)
        except AddressFull:
            return False
        except _REFUSED as e:
            what, reason = next((w, r) for t, w, r in _REFUSALS if isinstance(e, t))
            self._refused(ack, f"{what}: {e}", reason)
            return True
        waits = [f for f in (stored, session.blocked(address)) if f is not None]
        if not waits:
            self._ack(ack)
            return True
        done = asyncio.gather(*waits) if len(waits) > 1 else waits[0]
        done.add_done_callback(lambda f: self._settled(ack, f))
        return True

    def _settled(self, ack: str, f: asyncio.Future[Any]) -> None:
        if f.cancelled() or f.exception() is not None:
            # not stored, or we cannot tell: the remote resends it (a stored copy is dropped
            # then as a duplicate)
            self.link.close(f"store failure: {'cancelled' if f.cancelled() else f.exception()}")
            return
        self._ack(ack)

    def _ack(self, ack: str) -> None:
        self.link.send_frame("ACK", {"id": ack})

    def _refused(self, ack: str, text: str, reason: str | None) -> None:
        if reason is None:
            self.link.close(f"cannot take a message from the remote now: {text}")
            return
        log.warning(
            "bridge %s: refused a message from the remote (%s): %s", self.name, reason, text
        )
        self.link.send_frame("NACK", {"id": ack, REASON_HEADER: reason, "message": text})


__all__ = ["ReverseReceiver"]
