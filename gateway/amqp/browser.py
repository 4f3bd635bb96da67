"""A browsing receiver (source ``distribution-mode = copy``): the queue's messages without
taking them.

The core's :meth:`~waystation.core.session.Session.browse` gives a snapshot of what waits in
the queue at attach; it is handed out pre-settled as the link's credit allows (a drain sends
what is left within the credit, then echoes the drain).  When the snapshot is used up the
link stays attached and sends nothing more, as an ActiveMQ Artemis queue browser does; the
client detaches when it has seen the end (a drain that comes back with credit unused).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from proton import Condition, Link, Terminus

from waystation.core.message import Message, now_ms
from waystation.core.queue import MULTICAST
from waystation.core.session import SessionError
from waystation.gateway.amqp import errors, pn
from waystation.gateway.amqp.addresses import parse_address, source_fields
from waystation.gateway.amqp.links import refuse
from waystation.gateway.amqp.mapping import encode_message

if TYPE_CHECKING:
    from waystation.gateway.amqp.session import AmqpSession

BATCH = 256  # deliveries encoded per loop turn, so a large credit does not stall the loop


class Browser:
    """A link that copies a queue's waiting messages to the client (proton: our Sender)."""

    __slots__ = ("amqp", "link", "ptr", "messages", "sent", "closed", "_scheduled")
    incoming = False  # proton: a sender (deliveries go out on it)

    def __init__(self, amqp: AmqpSession, link: Link, messages: Iterator[Message]) -> None:
        self.amqp = amqp
        self.link = link
        self.ptr = link._impl  # the raw pn_link_t (see pn.py)
        self.messages: Iterator[Message] | None = messages  # None once used up
        self.sent = 0
        self.closed = False
        self._scheduled = False

    @classmethod
    def attach(cls, amqp: AmqpSession, link: Link) -> Browser | None:
        src = link.remote_source
        session = amqp.session
        assert session is not None
        try:
            caps, selector, _no_local, name = source_fields(src)
        except errors.CLIENT_ERRORS as e:  # not decodable, or a selector that is no string
            refuse(link, errors.condition(e))
            return None
        if src.dynamic or not name:
            refuse(
                link,
                Condition(errors.INVALID_FIELD, "browsing (distribution-mode copy) needs a queue"),
            )
            return None
        try:
            address, routing = parse_address(name, caps)
            if routing == MULTICAST:
                raise SessionError(f"{name!r} is a topic: only a queue can be browsed")
            messages = session.browse(address, selector)
        except SessionError as e:  # no such queue (or a topic)
            refuse(link, Condition(errors.NOT_FOUND, str(e)))
            return None
        except errors.CLIENT_ERRORS as e:  # not authorized, a bad selector or name
            refuse(link, errors.condition(e))
            return None
        b = cls(amqp, link, messages)
        link.source.copy(src)
        link.source.distribution_mode = Terminus.DIST_MODE_COPY
        link.target.copy(link.remote_target)
        link.snd_settle_mode = Link.SND_SETTLED  # copies: nothing for the client to settle
        link.rcv_settle_mode = Link.RCV_FIRST
        amqp.links[b.ptr] = b
        link.open()
        b.flow()
        return b

    def flow(self) -> None:
        """Credit from the client (or writing resumed): send what it allows."""
        if self.closed or self.amqp.paused_writing:
            return
        ptr = self.ptr
        n = 0
        while self.messages is not None and pn.credit(ptr) > 0:
            if n == BATCH:  # the rest next turn
                if not self._scheduled:
                    self._scheduled = True
                    self.amqp.loop.call_soon(self._more)
                break
            msg = next(self.messages, None)
            if msg is None:
                self.messages = None
                break
            self.sent += 1
            d = pn.send(ptr, b"%d" % self.sent, encode_message(msg, 1, now_ms()))
            pn.settle(d)
            n += 1
        if pn.drain_mode(ptr) and not self._scheduled:
            self.link.drained()  # gives back the credit we could not use
        self.amqp.want_flush()

    def _more(self) -> None:
        self._scheduled = False
        if not self.amqp.closed:
            self.flow()

    def disposition(self, d: Any) -> None:
        """Deliveries go out settled; a disposition from the client changes nothing."""
        pn.settle(d)

    def detach(self, closed: bool) -> None:
        self.released()

    def released(self) -> None:
        self.closed = True
        self.messages = None


__all__ = ["Browser"]
