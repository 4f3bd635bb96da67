"""A consumer attached to a queue: its filter, credit window and messages in flight.

The engine pushes deliveries to a ``DeliveryHandler`` (the protocol adapter) while the consumer
has credit; the adapter settles them or closes.  Two kinds of credit cover every protocol: a
``window`` of unsettled messages (STOMP prefetch, MQTT receive maximum; 0 = unbounded) and
``credit`` that each delivery consumes (AMQP link credit, with drain; -1 = not used).  A whole
consumer can be paused when the client's socket is full.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from waystation.core.filter import Filter
from waystation.core.message import Message

if TYPE_CHECKING:
    from waystation.core.queue import Queue
    from waystation.core.transaction import Transaction


class MessageRef:
    """One message's place in one queue."""

    __slots__ = ("message", "queue", "rid", "delivery_count")

    def __init__(
        self, message: Message, queue: Queue, rid: int = 0, delivery_count: int = 0
    ) -> None:
        self.message = message
        self.queue = queue
        self.rid = rid  # journal record id of this reference; 0 when not persisted
        self.delivery_count = delivery_count


class Delivery:
    """What a handler receives: the message, which attempt this is, and the tag to ack it by."""

    __slots__ = ("consumer", "ref", "tag")

    def __init__(self, consumer: Consumer, ref: MessageRef, tag: int) -> None:
        self.consumer = consumer
        self.ref = ref
        self.tag = tag

    @property
    def message(self) -> Message:
        return self.ref.message

    @property
    def delivery_count(self) -> int:
        return self.ref.delivery_count

    @property
    def redelivered(self) -> bool:
        return self.ref.delivery_count > 1


class DeliveryHandler(Protocol):
    def deliver(self, delivery: Delivery) -> None:
        """Called on the event loop for each message; must not block."""

    def consumer_closed(self, consumer: Consumer, reason: str) -> None:
        """The engine closed the consumer (queue deleted, node stopping)."""


class DrainHandler(Protocol):
    def drained(self, consumer: Consumer) -> None:
        """A drain found nothing more to send: the consumer's credit is now zero."""


class ConsumerError(Exception):
    pass


class Consumer:
    __slots__ = (
        "queue",
        "handler",
        "filter",
        "auto_ack",
        "window",
        "in_flight",
        "paused",
        "closed",
        "_next_tag",
        "name",
        "delivered",
        "acked",
        "credit",
        "owner",
    )

    def __init__(
        self,
        queue: Queue,
        handler: DeliveryHandler,
        *,
        filter: Filter | None = None,
        auto_ack: bool = False,
        window: int = 0,
        name: str = "",
        credit: int = -1,
        owner: object = None,
    ) -> None:
        self.queue = queue
        self.handler = handler
        self.filter = filter
        self.auto_ack = auto_ack
        self.window = window
        # tag -> reference, in delivery order (a plain dict: ordered, and cheaper to fill and
        # empty than an OrderedDict on the per-message path)
        self.in_flight: dict[int, MessageRef] = {}
        self.paused = False
        self.closed = False
        self._next_tag = 0
        self.name = name
        self.delivered = 0
        self.acked = 0
        self.credit = credit  # deliveries still allowed; -1: not credit-limited
        self.owner = owner  # the core session that opened it

    def ready(self) -> bool:
        return (
            not self.paused
            and not self.closed
            and self.credit != 0
            and (self.window <= 0 or len(self.in_flight) < self.window)
        )

    def _deliver(self, ref: MessageRef) -> None:
        if self.credit > 0:
            self.credit -= 1
        self._next_tag += 1
        tag = self._next_tag
        ref.delivery_count += 1
        self.delivered += 1
        if not self.auto_ack:
            self.in_flight[tag] = ref
        self.handler.deliver(Delivery(self, ref, tag))

    # -- flow control -------------------------------------------------------------------
    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            self.queue.dispatch()

    def set_credit(self, credit: int, drain: bool = False) -> None:
        """Link credit as the client grants it (absolute, like AMQP's flow).  With ``drain``
        the consumer uses up what it can now and its credit is then zeroed: the handler's
        ``drained`` says so, and the client knows the queue had nothing more for it."""
        self.credit = max(0, credit)
        self.queue.dispatch()
        if drain and not self.closed:
            self.credit = 0
            drained = getattr(self.handler, "drained", None)
            if drained is not None:
                drained(self)

    # -- settlement ---------------------------------------------------------------------
    def _take(self, tag: int) -> MessageRef:
        ref = self.in_flight.pop(tag, None)
        if ref is None:
            raise ConsumerError(f"no unacknowledged message with tag {tag} on this consumer")
        return ref

    def ack(self, tag: int, tx: Transaction | None = None) -> None:
        """Acknowledge one message."""
        ref = self.in_flight.pop(tag, None)  # ``_take``, inline: the per-message path
        if ref is None:
            raise ConsumerError(f"no unacknowledged message with tag {tag} on this consumer")
        self.acked += 1
        self.queue.acknowledge(ref, tx)

    def ack_cumulative(self, tag: int, tx: Transaction | None = None) -> int:
        """Acknowledge ``tag`` and every earlier message in flight; returns how many."""
        if tag not in self.in_flight:
            raise ConsumerError(f"no unacknowledged message with tag {tag} on this consumer")
        in_flight = self.in_flight
        tags = []
        for t in in_flight:  # one pass: the oldest first, up to ``tag``
            tags.append(t)
            if t == tag:
                break
        for t in tags:
            ref = in_flight.pop(t)
            self.acked += 1
            self.queue.acknowledge(ref, tx)
        return len(tags)

    def release(self, tags: list[int]) -> None:
        """Give messages back unprocessed, at the head of the queue in their order: no
        delivery attempt counted, no delay."""
        self.queue.requeue([self._take(t) for t in tags])
        self.queue.dispatch()

    def reject(self, tag: int, reason: str, detail: str = "") -> None:
        """The client refuses the message for good: it goes to the dead-letter address."""
        self.queue.ctx.dead_letter(self._take(tag), reason, detail)

    def tags_through(self, tag: int) -> list[int]:
        """``tag`` and every earlier message in flight, for cumulative settlement."""
        if tag not in self.in_flight:
            raise ConsumerError(f"no unacknowledged message with tag {tag} on this consumer")
        out = []
        for t in self.in_flight:
            out.append(t)
            if t == tag:
                break
        return out

    def nack(self, tag: int, tx: Transaction | None = None) -> None:
        """Give a message back: it is redelivered after the address's redelivery delay, or
        dead-lettered once it reached the maximum delivery attempts."""
        ref = self._take(tag)
        if tx is not None:
            tx.add_nack(ref)
        else:
            self.queue.cancel([ref])
        self.queue.dispatch()

    def is_in_flight(self, tag: int) -> bool:
        return tag in self.in_flight

    def close(self) -> None:
        """Detach; messages in flight go back to the queue (in their original order)."""
        if self.closed:
            return
        self.closed = True
        self.queue.remove_consumer(self)
        refs = list(self.in_flight.values())
        self.in_flight.clear()
        if refs:
            self.queue.cancel(refs)
        self.queue.dispatch()
