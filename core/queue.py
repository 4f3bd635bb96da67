"""A queue: ordered message references, the consumers competing for them, and dispatch.

Order is FIFO within a priority (0..9, higher first).  Scheduled and delayed-redelivery
messages wait in a timer heap.  Last-value queues keep only the newest message per key.
Message groups stick to one consumer.  Past the address's size limit with the PAGE policy,
new references spill to disk in order and are read back as the queue drains, so memory stays
bounded whatever the backlog.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections import Counter, deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import msgpack

from waystation.core.consumer import Consumer, ConsumerError, DeliveryHandler, MessageRef
from waystation.core.events import REDELIVERED, RELEASED, EventSink, emit_message
from waystation.core.filter import Filter
from waystation.core.message import Message, now_ms
from waystation.core.reasons import MAX_DELIVERIES
from waystation.core.settings import Resolved

if TYPE_CHECKING:
    from waystation.core.store.spill import SpillFile
    from waystation.core.transaction import Transaction

log = logging.getLogger("waystation.queue")

ANYCAST = "anycast"
MULTICAST = "multicast"
DEPAGE_BATCH = 1000
# Per-queue state most queues never use starts shared and empty, and is made on first write:
# a queue per subscriber (MQTT, STOMP topics) makes an idle queue the per-connection cost.
_NO_LEVELS: list[deque[MessageRef] | None] = [None] * 10  # no message yet; shared, never written
_NO_ENTRIES: dict[object, object] = {}  # never written to
_TIMER_SEQ = itertools.count()  # ties in a timer heap keep their order (one count for all)


class AddressUsage:
    """Bytes of message data held in memory for one address (over all its queues)."""

    __slots__ = ("address", "memory_bytes", "waiters")

    def __init__(self, address: str) -> None:
        self.address = address
        self.memory_bytes = 0
        self.waiters: list[asyncio.Future[None]] = []


class QueueContext(Protocol):
    """What a queue needs from the engine around it (implemented by the post office)."""

    loop: asyncio.AbstractEventLoop
    events: EventSink | None

    def settings(self, address: str) -> Resolved: ...
    def usage(self, address: str) -> AddressUsage: ...
    def memory_released(self, usage: AddressUsage) -> None: ...
    def on_acked(self, ref: MessageRef) -> None: ...
    def on_delivered(self, ref: MessageRef) -> None: ...
    def on_delivery_count(self, ref: MessageRef) -> None: ...
    def on_replaced(self, ref: MessageRef) -> None: ...
    def dead_letter(self, ref: MessageRef, reason: str, detail: str = "") -> None: ...
    def expire(self, ref: MessageRef) -> None: ...
    def spill_dir(self, queue: Queue) -> Path: ...
    def queue_unused(self, queue: Queue) -> None: ...


class Queue:
    # slots: a queue per subscriber (MQTT, STOMP topics) makes this the per-connection cost;
    # past 30 attributes an instance __dict__ also stops sharing its keys
    __slots__ = (
        "__weakref__",
        "_again",
        "_count",
        "_dispatch_scheduled",
        "_dispatching",
        "_groups",
        "_levels",
        "_lvq",
        "_may_expire",
        "_paging_enabled",
        "_rr",
        "_simple",
        "_spill",
        "_timer_handle",
        "_timers",
        "address",
        "auto_created",
        "consumers",
        "creator",
        "ctx",
        "deleted",
        "durable",
        "exclusive",
        "filter",
        "id",
        "max_consumers",
        "messages_acked",
        "messages_added",
        "_dead_lettered",
        "messages_expired",
        "name",
        "owner",
        "paused",
        "routing",
        "settings",
        "subscriber",
        "temporary",
        "usage",
    )

    def __init__(
        self,
        ctx: QueueContext,
        qid: int,
        name: str,
        address: str,
        *,
        routing: str = ANYCAST,
        durable: bool = True,
        temporary: bool = False,
        filter: Filter | None = None,
        exclusive: bool = False,
        max_consumers: int = -1,
        owner: object = None,
        auto_created: bool = False,
    ) -> None:
        self.ctx = ctx
        self.id = qid
        self.name = name
        self.address = address
        self.routing = routing
        self.durable = durable
        self.temporary = temporary
        self.filter: Any = filter  # a Filter, None, or a session's wrapper (duck-typed)
        self.exclusive = exclusive
        self.max_consumers = max_consumers
        self.owner = owner
        self.auto_created = auto_created
        self.creator = ""  # the user whose send or subscription auto-created it ("": the node)
        self.subscriber = ""  # a durable subscription's owner, "user/client-id"
        self.settings = ctx.settings(address)
        self._paging_enabled = self._pages(self.settings)
        self.usage = ctx.usage(address)
        # one FIFO per priority, highest first (index 9 - priority); a level is made when a
        # message of its priority first arrives (an idle queue holds ten Nones, not ten deques)
        self._levels: list[deque[MessageRef] | None] = _NO_LEVELS
        self._count = 0
        self._may_expire = False  # a waiting message may have an expiration (scan needed)
        self._timers: list[tuple[int, int, MessageRef]] = []
        self._timer_handle: asyncio.TimerHandle | None = None
        self._lvq: dict[object, MessageRef] = _NO_ENTRIES  # type: ignore[assignment]
        self._groups: dict[str, Consumer] = _NO_ENTRIES  # type: ignore[assignment]
        self.consumers: list[Consumer] = []
        self._rr = 0
        self._dispatching = False
        self._again = False
        self._dispatch_scheduled = False
        self._simple = True  # no consumer filters: dispatch takes the fast path
        self._spill: SpillFile | None = None
        self.messages_added = 0
        self.messages_acked = 0
        self.messages_expired = 0
        self._dead_lettered: Counter[str] | None = None  # by reason, made on first use
        self.paused = False  # an operator stopped delivery (messages keep arriving)
        self.deleted = False

    # -- introspection ------------------------------------------------------------------
    @property
    def depth(self) -> int:
        """Messages waiting (in memory, on disk and scheduled), not counting those in flight."""
        return self._count + len(self._timers) + (len(self._spill) if self._spill else 0)

    @property
    def messages_dead_lettered(self) -> Counter[str]:
        """Messages dead-lettered from this queue, by reason."""
        c = self._dead_lettered
        if c is None:
            c = self._dead_lettered = Counter()
        return c

    @property
    def dead_lettered_so_far(self) -> Counter[str] | None:
        """The dead-lettered counts if any were counted (a read that makes no Counter)."""
        return self._dead_lettered

    @property
    def in_flight(self) -> int:
        return sum(len(c.in_flight) for c in self.consumers)

    def __repr__(self) -> str:
        return f"<Queue {self.name} @{self.address} depth={self.depth}>"

    def refresh_settings(self) -> None:
        self.settings = self.ctx.settings(self.address)
        self._paging_enabled = self._pages(self.settings)

    @staticmethod
    def _pages(s: Resolved) -> bool:
        return s.max_size_bytes >= 0 and s.full_policy.value == "PAGE"

    # -- adding ---------------------------------------------------------------------------
    def add(self, ref: MessageRef, dispatch: bool = True) -> None:
        self.messages_added += 1
        msg = ref.message
        if msg.scheduled and msg.scheduled > now_ms():
            self._schedule(ref, msg.scheduled)
            return
        usage = self.usage
        if (
            self._spill is None
            and self.settings.last_value_key is None
            and not (self._paging_enabled and usage.memory_bytes >= self.settings.max_size_bytes)
        ):  # the common case, inline: what ``_enqueue`` does for it
            p = msg.priority
            i = 9 - p if 0 <= p <= 9 else (0 if p > 9 else 9)  # min/max: two calls more
            level = self._levels[i]
            if level is None:
                level = self._new_level(i)
            level.append(ref)
            self._count += 1
            usage.memory_bytes += msg.size()
            if msg.expiration:
                self._may_expire = True
        else:
            self._enqueue(ref)
        if dispatch and self.consumers and not self._dispatch_scheduled:
            # one dispatch pass per loop turn serves every message added in that turn
            self._dispatch_scheduled = True
            self.ctx.loop.call_soon(self._scheduled_dispatch)

    def _scheduled_dispatch(self) -> None:
        self._dispatch_scheduled = False
        self.dispatch()

    def _enqueue(self, ref: MessageRef, front: bool = False) -> None:
        key = self.settings.last_value_key
        if key is not None:
            lv = ref.message.get_property(key)
            if lv is not None:
                old = self._lvq.get(lv)
                if old is not None and old is not ref and self._remove(old):
                    self.ctx.on_replaced(old)
                if self._lvq is _NO_ENTRIES:
                    self._lvq = {}
                self._lvq[lv] = ref
        if not front and (self._spill is not None or self._over_limit()):
            self._spill_ref(ref)
            return
        p = ref.message.priority  # (inline: the hot path)
        i = 9 - p if 0 <= p <= 9 else (0 if p > 9 else 9)
        level = self._levels[i]
        if level is None:
            level = self._new_level(i)
        if front:
            level.appendleft(ref)
        else:
            level.append(ref)
        self._count += 1
        self.usage.memory_bytes += ref.message.size()
        if ref.message.expiration:
            self._may_expire = True

    def _level(self, priority: int) -> deque[MessageRef]:
        """The FIFO of ``priority`` (clamped to 0..9), made on first use."""
        i = 9 - min(9, max(0, priority))
        level = self._levels[i]
        if level is None:
            level = self._new_level(i)
        return level

    def _new_level(self, i: int) -> deque[MessageRef]:
        levels = self._levels
        if levels is _NO_LEVELS:
            levels = self._levels = [None] * 10
        level = levels[i] = deque()
        return level

    def _over_limit(self) -> bool:
        return self._paging_enabled and self.usage.memory_bytes >= self.settings.max_size_bytes

    def _remove(self, ref: MessageRef) -> bool:
        level = self._levels[9 - min(9, max(0, ref.message.priority))]
        if level is None:
            return False
        try:
            level.remove(ref)
        except ValueError:
            return False
        self._count -= 1
        self._released(ref)
        return True

    def _released(self, ref: MessageRef) -> None:
        self.usage.memory_bytes -= ref.message.size()
        if self.usage.waiters:
            self.ctx.memory_released(self.usage)

    # -- paging ---------------------------------------------------------------------------
    def _spill_ref(self, ref: MessageRef) -> None:
        if self._spill is None:
            from waystation.core.store.spill import SpillFile  # paging is rare: load on first use

            path = self.ctx.spill_dir(self)
            self._spill = SpillFile(path)
            log.info("queue %s is paging to %s", self.name, path)
        self._spill.append(msgpack.packb((ref.rid, ref.delivery_count, ref.message.encode())))

    def _unspill(self, blob: bytes) -> MessageRef:
        rid, count, data = msgpack.unpackb(blob)
        return MessageRef(Message.decode(data), self, rid, count)

    def _depage(self) -> None:
        spill = self._spill
        if spill is None:
            return
        s = self.settings
        room = s.max_size_bytes - self.usage.memory_bytes if s.max_size_bytes >= 0 else 1 << 62
        if room <= 0 and self._count:
            return
        for blob in spill.read(DEPAGE_BATCH, max(room, 1)):
            ref = self._unspill(blob)
            self._level(ref.message.priority).append(ref)
            self._count += 1
            self.usage.memory_bytes += ref.message.size()
            if ref.message.expiration:
                self._may_expire = True
        if not len(spill):
            spill.close(delete=True)
            self._spill = None
            log.info("queue %s stopped paging", self.name)

    # -- timers (scheduled delivery, delayed redelivery) ---------------------------------
    def _schedule(self, ref: MessageRef, at_ms: int) -> None:
        heapq.heappush(self._timers, (at_ms, next(_TIMER_SEQ), ref))
        if self._timers[0][2] is ref:
            self._arm_timer()

    def _arm_timer(self) -> None:
        if self._timer_handle is not None:
            self._timer_handle.cancel()
            self._timer_handle = None
        if self._timers:
            delay = max(0.0, (self._timers[0][0] - now_ms()) / 1000.0)
            self._timer_handle = self.ctx.loop.call_later(delay, self._fire_timers)

    def _fire_timers(self) -> None:
        self._timer_handle = None
        now = now_ms()
        fired = False
        while self._timers and self._timers[0][0] <= now:
            _, _, ref = heapq.heappop(self._timers)
            self._enqueue(ref, front=ref.delivery_count > 0)
            fired = True
        self._arm_timer()
        if fired:
            self.dispatch()

    # -- consumers ------------------------------------------------------------------------
    def add_consumer(
        self,
        handler: DeliveryHandler,
        *,
        filter: Filter | None = None,
        auto_ack: bool = False,
        window: int | None = None,
        name: str = "",
        credit: int = -1,
        owner: object = None,
    ) -> Consumer:
        if self.deleted:
            raise ConsumerError(f"queue {self.name!r} has been deleted")
        if self.max_consumers >= 0 and len(self.consumers) >= self.max_consumers:
            raise ConsumerError(
                f"queue {self.name!r} already has its maximum of {self.max_consumers} consumers"
            )
        if self.exclusive and self.consumers:
            raise ConsumerError(f"queue {self.name!r} is exclusive and already has a consumer")
        c = Consumer(
            self,
            handler,
            filter=filter,
            auto_ack=auto_ack,
            window=self.settings.default_consumer_window if window is None else window,
            name=name,
            credit=credit,
            owner=owner,
        )
        self.consumers.append(c)
        self._simple = all(x.filter is None for x in self.consumers)
        self.ctx.loop.call_soon(self.dispatch)
        return c

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
            self._simple = all(x.filter is None for x in self.consumers)
            if not self.consumers and self.creator:  # a client's auto-created queue: may go
                self.ctx.queue_unused(self)
        for g, c in list(self._groups.items()):
            if c is consumer:
                del self._groups[g]

    # -- dispatch -------------------------------------------------------------------------
    def dispatch(self) -> None:
        """Hand waiting messages to consumers with credit.  Re-entrant calls are folded."""
        if self._dispatching:
            self._again = True
            return
        if self.paused:
            return
        self._dispatching = True
        try:
            while True:
                self._again = False
                if self._spill is not None and self._count < DEPAGE_BATCH:
                    self._depage()
                if self._count and self.consumers:
                    self._dispatch_pass()
                if not self._again:
                    break
        finally:
            self._dispatching = False

    def _next_ref(self) -> MessageRef | None:
        for level in self._levels:
            if level:
                self._count -= 1
                return level.popleft()
        return None

    def _dispatch_pass(self) -> None:
        consumers = self.consumers
        if not self._simple or self._groups or self.settings.last_value_key is not None:
            self._dispatch_selective()
            return
        n = len(consumers)
        idle = 0
        # hot loop: ``ready``, ``_next_ref``, ``_released`` and ``_hand`` inlined (no
        # last-value key here, so ``_hand`` is the delivery, its event and auto-ack)
        levels = self._levels
        usage = self.usage
        ctx = self.ctx
        while self._count:
            if self._spill is not None and self._count < DEPAGE_BATCH:
                self._depage()
            if self._rr >= n:
                self._rr = 0
                n = len(consumers)
                if not n:
                    return
            c = consumers[self._rr]
            self._rr += 1
            if (
                c.paused
                or c.closed
                or c.credit == 0
                or (c.window > 0 and len(c.in_flight) >= c.window)
            ):
                idle += 1
                if idle >= n:
                    return
                continue
            idle = 0
            for level in levels:
                if level:
                    break
            else:
                return
            self._count -= 1
            ref = level.popleft()
            msg = ref.message
            usage.memory_bytes -= msg._size or msg.size()  # sized as it was added: no call
            if usage.waiters:
                ctx.memory_released(usage)
            if msg.expiration and msg.expired():
                ctx.expire(ref)
                continue
            if msg.group() is not None:
                # groups appear: put it back and switch to the selective path
                self._level(msg.priority).appendleft(ref)
                self._count += 1
                usage.memory_bytes += msg.size()
                self._rr -= 1
                self._dispatch_selective()
                return
            c._deliver(ref)
            if ctx.events is not None:  # (no call when the event log is off)
                ctx.on_delivered(ref)
            if c.auto_ack:
                self.acknowledge(ref, None)
            if len(consumers) != n:
                n = len(consumers)
                if not n:
                    return

    def _dispatch_selective(self) -> None:
        """Slow path: consumer filters, message groups or last-value keys in play."""
        now = now_ms()
        for level in self._levels:
            if not level:
                continue
            keep: deque[MessageRef] = deque()
            while level:
                ready = [c for c in self.consumers if c.ready()]
                if not ready:
                    keep.extend(level)
                    level.clear()
                    break
                ref = level.popleft()
                msg = ref.message
                if msg.expiration and msg.expiration <= now:
                    self._count -= 1
                    self._released(ref)
                    self.ctx.expire(ref)
                    continue
                target = self._pick(ready, ref)
                if target is None:
                    keep.append(ref)
                    continue
                self._count -= 1
                self._released(ref)
                self._hand(target, ref)
            level.extend(keep)

    def _pick(self, ready: list[Consumer], ref: MessageRef) -> Consumer | None:
        msg = ref.message
        group = msg.group()
        if group is not None:
            gkey = str(group)
            owner = self._groups.get(gkey)
            if owner is not None and not owner.closed:
                return (
                    owner
                    if owner.ready() and (owner.filter is None or owner.filter.matches(msg))
                    else None
                )
        n = len(ready)
        for i in range(n):
            c = ready[(self._rr + i) % n]
            if c.filter is None or c.filter.matches(msg):
                self._rr = (self._rr + i + 1) % max(1, len(self.consumers))
                if group is not None:
                    if self._groups is _NO_ENTRIES:
                        self._groups = {}
                    self._groups[str(group)] = c
                return c
        return None

    def _hand(self, consumer: Consumer, ref: MessageRef) -> None:
        key = self.settings.last_value_key
        if key is not None:
            lv = ref.message.get_property(key)
            if lv is not None and self._lvq.get(lv) is ref:
                del self._lvq[lv]
        consumer._deliver(ref)
        self.ctx.on_delivered(ref)
        if consumer.auto_ack:
            self.acknowledge(ref, None)

    # -- settlement -----------------------------------------------------------------------
    def acknowledge(self, ref: MessageRef, tx: Transaction | None) -> None:
        if tx is not None:
            tx.add_ack(ref)
            return
        self.messages_acked += 1
        self.ctx.on_acked(ref)

    def cancel(self, refs: list[MessageRef]) -> None:
        """Messages given back (nack, consumer closed, rollback): redeliver or dead-letter."""
        s = self.settings
        delayed_any = False
        for ref in reversed(refs):
            if 0 <= s.max_delivery_attempts <= ref.delivery_count:
                self.ctx.dead_letter(
                    ref,
                    MAX_DELIVERIES,
                    f"delivered {ref.delivery_count} times without acknowledgement",
                )
                continue
            self.ctx.on_delivery_count(ref)
            emit_message(
                self.ctx.events,
                REDELIVERED,
                ref.message,
                self.name,
                delivery_count=ref.delivery_count,
            )
            delay = s.redelivery_delay(ref.delivery_count)
            if delay > 0:
                heapq.heappush(self._timers, (now_ms() + int(delay * 1000), next(_TIMER_SEQ), ref))
                delayed_any = True
            else:
                self._enqueue(ref, front=True)
        if delayed_any:
            self._arm_timer()

    def take(self, pick: Callable[[Message], bool], limit: int = -1) -> list[MessageRef]:
        """Remove and return the waiting references (memory part, delivery order) whose
        message ``pick`` accepts, ``limit`` at most (-1: all): the operator's delete and move."""
        found: list[MessageRef] = []
        for level in self._levels:
            if not level:
                continue
            for ref in list(level):
                if pick(ref.message) and self._remove(ref):
                    found.append(ref)
                    if len(found) == limit:
                        return found
        return found

    def put_back(self, refs: list[MessageRef]) -> None:
        """Undo :meth:`take`: the references back at the head, in their order."""
        for ref in reversed(refs):
            self._enqueue(ref, front=True)

    def requeue(self, refs: list[MessageRef]) -> None:
        """Messages released unprocessed (AMQP released): back at the front in their order,
        with no redelivery delay and no delivery attempt counted."""
        events = self.ctx.events
        for ref in reversed(refs):
            if ref.delivery_count > 0:
                ref.delivery_count -= 1
            emit_message(
                events, RELEASED, ref.message, self.name, delivery_count=ref.delivery_count
            )
            self._enqueue(ref, front=True)

    # -- maintenance ----------------------------------------------------------------------
    def expire_scan(self, now: int) -> int:
        """Remove expired messages waiting in memory; returns how many.  Skipped while no
        waiting message has an expiration (a big backlog is not walked every second)."""
        if not self._may_expire:
            return 0
        n = 0
        later = False  # a message that expires later stays: scan again
        for level in reversed(self._levels):  # lowest priority first, as always
            if not level:
                continue
            expired = []
            for r in level:
                e = r.message.expiration
                if e:
                    if e <= now:
                        expired.append(r)
                    else:
                        later = True
            for ref in expired:
                level.remove(ref)
                self._count -= 1
                self._released(ref)
                self.ctx.expire(ref)
                n += 1
        self._may_expire = later
        return n

    def browse(self, filter: Filter | None = None) -> Iterator[Message]:
        """The waiting messages in delivery order, without removing them (memory part only)."""
        for level in list(self._levels):
            if not level:
                continue
            for ref in list(level):
                if filter is None or filter.matches(ref.message):
                    yield ref.message

    def drain_all(self) -> list[MessageRef]:
        """Take every waiting reference out (queue deletion, purge)."""
        refs: list[MessageRef] = []
        for level in reversed(self._levels):  # lowest priority first, as always
            if level:
                refs.extend(level)
                level.clear()
        for ref in refs:
            self._released(ref)
        self._count = 0
        refs.extend(r for _, _, r in self._timers)
        self._timers.clear()
        self._arm_timer()
        if self._spill is not None:
            while len(self._spill):
                refs.extend(map(self._unspill, self._spill.read(DEPAGE_BATCH, 1 << 30)))
            self._spill.close(delete=True)
            self._spill = None
        self._lvq = _NO_ENTRIES  # type: ignore[assignment]
        return refs

    def close(self) -> None:
        if self._timer_handle is not None:
            self._timer_handle.cancel()
        if self._spill is not None:
            self._spill.close(delete=True)
            self._spill = None
