"""Pull consumers: one engine consumer each, holding messages only while a client pulls.

The engine consumer has a window of one and stays paused except while a consume-next or
acknowledge-next request is waiting, so a REST consumer never sits on a message another
consumer of the queue could take.  State per consumer:

- auto-ack: ``next_index`` (the ``consume-next-{n}`` the client must use) and the last
  message handed out (``cached``), returned again when the same URL is re-POSTed;
- manual ack: ``pending`` (index and delivery awaiting its acknowledgement) or, when none,
  ``next_index`` for the next ``acknowledge-next-{n}``; ``last_ack`` makes a re-POSTed
  acknowledgement harmless.

The reaper closes consumers idle longer than their timeout; closing gives an unacknowledged
message back to the queue for redelivery and deletes a temporary topic subscription (a
durable one stays, unless ``delete-when-idle`` was asked).  When the server stops, every
consumer is ``stopping``: a held long poll answers at once and no new wait begins.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from dataclasses import dataclass

from waystation.core.consumer import Consumer, Delivery
from waystation.core.message import Message
from waystation.core.session import Outcome, Session
from waystation.gateway.http.rest.substore import SubscriptionStore

log = logging.getLogger("waystation.rest")


@dataclass(slots=True, frozen=True)
class Snapshot:
    """A delivered message as it was handed out (for idempotent re-POSTs)."""

    message: Message
    delivery_count: int


class PullConsumer:
    def __init__(
        self,
        cid: str,
        kind: str,
        destination: str,
        auto_ack: bool,
        *,
        timeout: float,
        durable_name: str | None = None,
        delete_when_idle: bool = False,
    ) -> None:
        self.id = cid
        self.kind = kind
        self.destination = destination
        self.auto_ack = auto_ack
        self.timeout = timeout
        self.durable_name = durable_name
        self.delete_when_idle = delete_when_idle
        self.owner: tuple[str, str] = ("", "")  # (user, source host) counted in Owners
        self.session: Session | None = None  # its own core session (see .sessions)
        self._consumer: Consumer | None = None
        self.lock = asyncio.Lock()
        self.closed = False
        self.stopping = False
        self.busy = 0
        self.last_used = time.monotonic()
        self.next_index = 1
        self.cached: tuple[int, Snapshot] | None = None
        self.pending: tuple[int, Delivery] | None = None
        self.last_ack: tuple[int, bool] | None = None
        self._waiter: asyncio.Future[Delivery | None] | None = None
        self._buffer: list[Delivery] = []

    @property
    def consumer(self) -> Consumer:
        assert self._consumer is not None
        return self._consumer

    def attach(self, session: Session, consumer: Consumer) -> None:
        self.session = session
        self._consumer = consumer
        consumer.pause()  # before the dispatch add_consumer scheduled runs

    def settle(self, d: Delivery, outcome: Outcome) -> None:
        """Settle ``d`` through the consumer's session (the consumer stays paused)."""
        assert self.session is not None
        self.session.settle(d.consumer, d.tag, outcome)

    # -- DeliveryHandler ----------------------------------------------------------------
    def deliver(self, delivery: Delivery) -> None:
        delivery.consumer.pause()
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(delivery)
        else:
            self._buffer.append(delivery)

    def consumer_closed(self, consumer: Consumer, reason: str) -> None:
        log.info("REST consumer %s closed by the engine: %s", self.id, reason)
        self.closed = True
        self._wake()

    # -- pulling ------------------------------------------------------------------------
    async def take(self, wait: float) -> Delivery | None:
        """The next message, waiting up to ``wait`` seconds; None when none came."""
        if self._buffer:
            return self._buffer.pop(0)
        if self.closed or self.stopping:
            return None
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Delivery | None] = loop.create_future()
        self._waiter = fut
        handle: asyncio.TimerHandle | None = None
        try:
            self.consumer.resume()
            if not fut.done() and wait > 0:
                handle = loop.call_later(wait, _resolve_none, fut)
                await fut
        finally:
            if handle is not None:
                handle.cancel()
            self._waiter = None
            if not self.closed:
                self.consumer.pause()
        if fut.done() and not fut.cancelled():
            return fut.result()
        return None

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def touch(self) -> None:
        self.last_used = time.monotonic()

    def idle_for(self, now: float) -> float:
        return 0.0 if self.busy else now - self.last_used

    def close(self, *, delete_durable: bool = False) -> None:
        """Detach and close the session: an unacknowledged message goes back to its queue;
        ``delete_durable`` also deletes a durable subscription (checked for its owner)."""
        if self.closed and self.session is None:
            return
        self.closed = True
        self._wake()
        session, self.session = self.session, None
        consumer, self._consumer = self._consumer, None
        self.pending = None
        self._buffer.clear()
        if session is None:
            return
        try:
            if consumer is not None:
                session.unsubscribe(consumer, delete_durable=delete_durable)
        except Exception:  # the queue may be gone already, or the owner may not delete it
            log.exception("closing REST consumer %s", self.id)
        finally:
            session.close()


def _resolve_none(fut: asyncio.Future[Delivery | None]) -> None:
    if not fut.done():
        fut.set_result(None)


class Owners:
    """Places held per user and per source host, so that no one client (and no flood of
    unauthenticated or anonymous requests from one address) can take every place."""

    def __init__(self, per_user: int, per_host: int) -> None:
        self.per_user = per_user
        self.per_host = per_host
        self.users: Counter[str] = Counter()
        self.hosts: Counter[str] = Counter()

    def refusal(self, user: str, host: str, what: str) -> str | None:
        """Why ``user`` at ``host`` may not take one more place (naming the limit)."""
        if user and self.users[user] >= self.per_user:
            return f"too many {what} for user {user!r} (max_consumers_per_user = {self.per_user})"
        if self.hosts[host] >= self.per_host:
            return (
                f"too many {what} from your address (max_consumers_per_address = {self.per_host})"
            )
        return None

    def take(self, owner: tuple[str, str]) -> None:
        user, host = owner
        if user:
            self.users[user] += 1
        self.hosts[host] += 1

    def give_back(self, owner: tuple[str, str]) -> None:
        for counter, key in ((self.users, owner[0]), (self.hosts, owner[1])):
            if not key:
                continue
            n = counter[key] - 1
            if n > 0:
                counter[key] = n
            else:
                counter.pop(key, None)


class Registry:
    """Live pull consumers by id, the durable subscriptions REST made, and the reaper that
    closes idle consumers."""

    def __init__(
        self,
        interval: float,
        subscriptions: SubscriptionStore,
        owners: Owners | None = None,
    ) -> None:
        self.interval = interval
        self.subscriptions = subscriptions
        self.owners = owners or Owners(1 << 62, 1 << 62)
        self.consumers: dict[str, PullConsumer] = {}
        self.stopping = False
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self.consumers)

    def get(self, cid: str) -> PullConsumer | None:
        c = self.consumers.get(cid)
        if c is not None and c.closed:
            self.remove(c)
            return None
        return c

    def add(self, c: PullConsumer) -> None:
        self.consumers[c.id] = c
        self.owners.take(c.owner)

    def remove(self, c: PullConsumer, *, delete_durable: bool = False) -> None:
        if self.consumers.get(c.id) is c:
            del self.consumers[c.id]
            self.owners.give_back(c.owner)
        c.close(delete_durable=delete_durable)
        if delete_durable and c.durable_name is not None:
            self.subscriptions.discard(c.durable_name)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._reap())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for c in list(self.consumers.values()):
            self.remove(c)

    def wake_all(self) -> None:
        """The server is stopping: held polls answer now, queued ones do not start waiting."""
        self.stopping = True
        for c in self.consumers.values():
            c.stopping = True
            c._wake()

    def reap_once(self) -> int:
        now = time.monotonic()
        n = 0
        for c in list(self.consumers.values()):
            if c.closed or c.idle_for(now) > c.timeout:
                log.info(
                    "REST consumer %s on %s idle for %.1fs: removed",
                    c.id,
                    c.destination,
                    c.idle_for(now),
                )
                self.remove(c, delete_durable=c.delete_when_idle and c.durable_name is not None)
                n += 1
        return n

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.reap_once()
            except Exception:
                log.exception("REST consumer reaper")


__all__ = ["Owners", "PullConsumer", "Registry", "Snapshot"]
