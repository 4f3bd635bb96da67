"""A core bridge: drains a local queue into a remote Waystation node, once and only once, in order.

How it keeps the promise:

* The bridge is an ordinary consumer of its source queue, through one core session opened
  with the node's own principal (``SYSTEM``; it shows in the engine's session list), with a
  window of ``confirmation_window`` unsettled messages.  Each delivery is forwarded through
  the link (link.py: a STOMP ``SEND`` with a ``receipt``, or an unsettled AMQP transfer); the
  remote confirms (RECEIPT, ``accepted``) only once the message is on its disk, and only
  then is it settled as accepted locally (and leaves the source queue).  Up to the window is in flight at once, so a long, fat link stays full.
* Every SEND carries ``_WS_DUPL_ID = <node>/<bridge>/<message id>``.  Message ids are stored
  with the message, so the id is the same after a restart of either side, and the remote's
  persisted duplicate cache drops any copy it already stored.
* A durable message is forwarded only once it is on this node's disk (the queue hands it
  over as soon as it is routed, while its journal batch may still be waiting for the group
  commit).  Forwarded earlier, a ``kill -9`` could lose it here together with the duplicate
  id it came with, after the remote stored it: the producer (or the previous hop), never
  confirmed, resends it; this node, knowing no such id, takes it as new under a new message
  id, and so a new ``_WS_DUPL_ID`` that the remote cannot recognise (a duplicate).
* The consumer stays attached while the link is down: the messages it holds (sent but
  unconfirmed, or not yet sent) stay in delivery order and are sent first, in that order, on
  the next connection.  So a resend never jumps the queue and delivery counts do not grow
  with every cut.  On stop or when the bridge gives up they are released (no delivery
  attempt counted) to the head of the queue, where the next run finds them in the same order;
  after a crash they are there too (delivery counts live in memory until a settlement).
* Reconnecting: the URLs are tried in order on each attempt; after a failed attempt the
  bridge waits ``retry_interval * retry_multiplier ** n`` (capped at ``max_retry_interval``)
  and gives up after ``reconnect_attempts`` failed attempts in a row (-1: never).  A link
  that was lost after doing useful work is redialled at once.

The source may also be a topic subscription queue (``[[topics.subscriptions]]``): the node's
own session may read one by name, with the bridge's ``filter`` on top.

Undeliverable messages go to the dead-letter address and the bridge goes on with the ones
behind them:

* the remote refused one message (a STOMP ERROR naming its receipt, an AMQP ``rejected``):
  the reason comes from the error text or condition (``invalid-remote-destination``, ``remote-authorization``,
  ``message-too-large``, ``remote-rejected``); transient refusals (store trouble, a full
  address) are retried after a backoff instead.  An ERROR that names no receipt puts the
  bridge in careful mode: the messages that were in flight are resent one at a time, so the
  next refusal identifies its message.
* ``routing-timeout``: while the link is down, a message that has waited longer than
  ``routing_timeout`` (counted from when the link went down, or from when the message was
  created if later) without ever having been sent.
* ``remote-authentication``: the remote refuses the bridge's credentials at CONNECT.  That
  is usually a configuration slip fixed within minutes, so the bridge keeps retrying with
  backoff like for any other link failure; only messages that then wait past
  ``routing_timeout`` are dead-lettered, with this reason instead of ``routing-timeout``.
  Without a routing timeout nothing is dead-lettered and messages wait for the fix.
* ``in-doubt-timeout``: a message sent on a link that failed before its receipt came back is
  in doubt; it is resent on every reconnect until ``in_doubt_timeout`` after its first send,
  then dead-lettered at the source (a copy the remote may already hold is not touched).
  In-doubt tracking lives in memory: after a restart the clock starts again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from waystation.bridges.link import BridgeLink, MessageTooLarge
from waystation.bridges.redial import (
    CONNECTED,
    CONNECTING,
    RETRYING,
    STOPPED,
    Redialing,
    link_options,
)
from waystation.bridges.reverse import ReverseReceiver
from waystation.bridges.spec import BridgeSpec
from waystation.bridges.stomp_link import StompLink
from waystation.core.consumer import Consumer, ConsumerError, Delivery
from waystation.core.divert import Transformer, load_transformer
from waystation.core.events import FORWARDED, emit_message
from waystation.core.limits import LimitExceeded
from waystation.core.message import Message, now_ms
from waystation.core.queue import ANYCAST
from waystation.core.reasons import (
    IN_DOUBT_TIMEOUT,
    MESSAGE_TOO_LARGE,
    REMOTE_AUTHENTICATION,
    ROUTING_TIMEOUT,
)
from waystation.core.security import SYSTEM
from waystation.core.session import CreditMode, Outcome, Session, Source

if TYPE_CHECKING:
    from waystation.core.engine import Engine

log = logging.getLogger("waystation.bridge")

# the protocol name of a bridge's core session (the admin API's session list)
SESSION_PROTOCOL = "bridge"
WRITE_HIGH_WATER = 4 * 1024 * 1024


class _Entry:
    """One message the bridge holds: delivered to it and not yet confirmed or given up."""

    __slots__ = (
        "tag",
        "message",
        "stored",
        "frame",
        "version",
        "sent_on",
        "first_sent",
        "in_doubt",
    )

    def __init__(self, tag: int, message: Message, stored: bool) -> None:
        self.tag = tag
        self.message = message
        self.stored = stored  # on this node's disk (or never to be): it may be forwarded
        self.frame: bytes | None = None  # the encoded message, kept for resends
        self.version = ""  # the link encoding it was encoded for (BridgeLink.encoding)
        self.sent_on = 0  # the connection it was last sent on (0: not sent)
        self.first_sent = 0.0  # monotonic time of the first send
        self.in_doubt = False  # sent on a link that failed before the receipt came


class CoreBridge(Redialing):
    """One ``[[bridges]]`` entry at run time; also the ``DeliveryHandler`` of its consumer."""

    def __init__(self, engine: Engine, spec: BridgeSpec) -> None:
        self.engine = engine
        self.spec = spec
        self.state = STOPPED
        self.url: str | None = None
        self.next_attempt: float | None = None  # epoch seconds of the next connection attempt
        self.forwarded = 0
        self.failed = 0  # failed connection attempts and lost links
        self.dead_lettered = 0
        self.last_error: str | None = None
        self.transform: Transformer | None = (
            load_transformer(spec.transformer) if spec.transformer else None
        )
        self._options = link_options(
            spec,
            client_id=f"bridge.{engine.node_name}.{spec.name}",
            node=engine.node_name,
            expect_node=spec.remote_node,
        )
        self._entries: dict[int, _Entry] = {}  # by consumer tag, in delivery order
        self._unsent: deque[int] = deque()  # tags to send on the current link, in order
        self._confirmed: list[int] = []  # tags the remote confirmed, to settle (accepted)
        self._settle_scheduled = False
        self._careful: set[int] = set()  # suspects of an unattributed ERROR
        self._careful_tag: int | None = None  # the one suspect in flight
        self._link: BridgeLink | None = None
        self._conn = 0
        self._session: Session | None = None
        self._consumer: Consumer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._down_since_ms = now_ms()
        self._auth_refused = False
        self._progress = False
        self._link_error: str | None = None
        self._write_paused = False
        self._drain_task: asyncio.Task[None] | None = None  # keeps the task referenced
        self._unstored: list[_Entry] = []  # delivered, waiting for the next journal flush
        self._flush_task: asyncio.Task[None] | None = None
        self.paused = False  # the admin paused it: no new messages from the source

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        if not self._has_targets():
            return
        self._stopping = False
        self._down_since_ms = now_ms()
        self._release()  # a restart after giving up: the old session is gone
        self._session, self._consumer = self._subscribe()
        if self.paused:
            self._session.pause()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._run()), loop.create_task(self._watch())]

    def _subscribe(self) -> tuple[Session, Consumer]:
        """Open the bridge's session and attach to the source queue as it is."""
        spec = self.spec
        session = self.engine.open_session(
            SYSTEM, SESSION_PROTOCOL, self._session_remote(), client_id=spec.name
        )
        try:
            consumer = session.subscribe(
                Source(spec.queue, ANYCAST, spec.filter),
                self,
                mode=CreditMode.WINDOW,
                window=spec.window,
                name=f"bridge:{spec.name}",
            )
        except Exception:
            session.close()
            raise
        return session, consumer

    def _session_remote(self) -> str:
        """What the session list shows as the other end: the remote node's name."""
        return self.spec.remote_node

    async def stop(self) -> None:
        """Close the link and give every held message back to the head of the queue."""
        self._stopping = True
        link = self._link
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks = []
        if self._flush_task is not None:
            self._flush_task.cancel()
            self._flush_task = None
        if link is not None:
            link.close("bridge stopping")
            self._link_lost(link)
            await link.wait_closed()
        self._release()
        self.next_attempt = None
        self._set_state(STOPPED)

    def _gave_up(self) -> None:
        self._release()

    def pause(self) -> None:
        """Take no new messages from the source queue; the link stays up and what the bridge
        already holds is still sent and confirmed."""
        self.paused = True
        if self._session is not None:
            self._session.pause()
        log.info("bridge %s: paused", self.spec.name)

    def resume(self) -> None:
        self.paused = False
        if self._session is not None and not self._write_paused:
            self._session.resume()
        log.info("bridge %s: resumed", self.spec.name)

    def _release(self) -> None:
        """Give every held message back, unprocessed and in order, and close the session.

        Released, not merely detached: a consumer that closes with messages in flight counts
        a delivery attempt (and a redelivery delay) for each, and a bridge's attempts are link
        failures that must never dead-letter a message as ``max-deliveries``."""
        self._settle_confirmed()  # confirmed ones are accepted, never given back
        session, self._session = self._session, None
        consumer, self._consumer = self._consumer, None
        tags = list(self._entries)
        self._entries.clear()
        self._unsent.clear()
        self._unstored.clear()
        self._careful.clear()
        self._careful_tag = None
        self._write_paused = False
        if session is None or session.closed:
            return
        if consumer is not None and self.engine.started:
            session.pause()  # no redelivery to this consumer while it lets go
            for tag in reversed(tags):  # each goes to the head: the last one first
                with contextlib.suppress(ConsumerError):
                    session.settle(consumer, tag, Outcome.RELEASED)
        with contextlib.suppress(Exception):
            session.close()

    # -- the connection loop ----------------------------------------------------------------
    async def _run(self) -> None:
        try:
            await self._connection_loop()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("bridge %s: failed", self.spec.name)
            self.last_error = f"internal error: {e!r}"
            if self._link is not None:
                self._link.close(self.last_error)
            self._release()
            self._set_state(STOPPED)

    async def _serve(self, link: BridgeLink, target: object) -> None:
        link.on_confirmed = self._on_confirmed
        link.on_refused = self._on_refused
        self._conn += 1
        self._link = link
        self._link_error = None
        self._progress = False
        self.url = str(target)
        started = time.monotonic()
        self._set_state(CONNECTED)
        if self.spec.two_way:
            self._receive_back(link)
        self._pump()
        try:
            reason = await asyncio.shield(link.closed)
        finally:
            self._link_lost(link)
        self.last_error = self._link_error or reason
        if time.monotonic() - started >= self.spec.retry.interval:
            self._progress = True
        log.info(
            "bridge %s: link to %s lost: %s (%d messages held)",
            self.spec.name,
            target,
            self.last_error,
            len(self._entries),
        )
        await link.wait_closed()

    def _receive_back(self, link: BridgeLink) -> None:
        """``direction = "both"``: the remote's traffic for this node comes back on this link,
        sent here through a session of its own: as ``receive_as`` (that user's permissions
        apply), else as the node itself.  The session ends with the link."""
        assert isinstance(link, StompLink)  # (config checks)
        name = self.spec.receive_as
        principal = SYSTEM if name is None else self.engine.principal_named(name)
        if principal is None:  # the user went away in a reload
            link.close(f"receive_as user {name!r} does not exist")
            return
        try:
            session = self.engine.open_session(
                principal, SESSION_PROTOCOL, self._session_remote(), f"{self.spec.name}:back"
            )
        except LimitExceeded as e:
            link.close(f"cannot receive as {principal.name!r}: {e}")
            return
        link.closed.add_done_callback(lambda _: session.close())
        ReverseReceiver(self.spec.name, session, link, self.engine.ids).start()

    def _link_lost(self, link: BridgeLink) -> None:
        if self._link is not link:
            return
        link.close("bridge stopping")
        self._link = None
        self._down_since_ms = now_ms()
        self._careful_tag = None
        for e in self._entries.values():
            if e.first_sent:
                e.in_doubt = True
        self._unsent = deque(self._entries)
        if self._write_paused:
            self._write_paused = False
            if self._session is not None and not self.paused:
                self._session.resume()

    # -- consuming (DeliveryHandler) --------------------------------------------------------
    def deliver(self, delivery: Delivery) -> None:
        if delivery.consumer is not self._consumer:
            return
        msg = delivery.message
        stored = not (msg.durable and self.engine.persistence.enabled)
        entry = _Entry(delivery.tag, msg, stored)
        self._entries[delivery.tag] = entry
        if self._link is None and self._waited_too_long(entry, now_ms()):
            self._expire(entry)
            return
        self._unsent.append(delivery.tag)
        if not stored:
            self._await_stored(entry)
        elif self._link is not None:
            self._pump()

    def _await_stored(self, entry: _Entry) -> None:
        """Forward ``entry`` only after the next journal flush: it is delivered as soon as it
        is routed, and its batch (and the duplicate id it came with) may not be written yet.
        One flush at a time; the entries delivered meanwhile wait for the next one."""
        self._unstored.append(entry)
        if self._flush_task is None or self._flush_task.done():
            self._flush_task = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        # a task: it starts after the burst of input that routed the entries handed its
        # journal batch over, so the flush covers them
        while self._unstored:
            batch, self._unstored = self._unstored, []
            try:
                await self.engine.persistence.journal.flush()  # (messages, their dup ids)
            except Exception as e:  # the store failed: nothing more is forwarded
                self._unstored = batch + self._unstored
                self.last_error = f"store: {e}"
                log.error("bridge %s: cannot forward, the store failed: %s", self.spec.name, e)
                return
            for entry in batch:
                entry.stored = True
            self._pump()

    def consumer_closed(self, consumer: Consumer, reason: str) -> None:
        if consumer is not self._consumer:
            return
        self.last_error = f"source queue consumer closed: {reason}"
        log.warning("bridge %s: %s", self.spec.name, self.last_error)
        self._consumer = None
        session, self._session = self._session, None
        if session is not None:
            session.close()
        self._confirmed.clear()
        self._entries.clear()
        self._unsent.clear()
        self._unstored.clear()
        self._stopping = True
        for t in self._tasks:
            t.cancel()
        if self._link is not None:
            self._link.close("source queue gone")
        self._set_state(STOPPED)

    # -- sending ----------------------------------------------------------------------------
    def _pump(self) -> None:
        """Send what is waiting, in order (one at a time in careful mode)."""
        link = self._link
        if link is None:
            return
        entries = self._entries
        mono = time.monotonic()
        while self._unsent:
            if self._careful:
                if self._careful_tag is not None and self._careful_tag in entries:
                    return
                self._careful_tag = None
            tag = self._unsent[0]
            entry = entries.get(tag)
            if entry is not None and not entry.stored:
                break  # in order: it and the ones behind it wait for the journal
            self._unsent.popleft()
            if entry is None or entry.sent_on == self._conn:
                continue
            if entry.in_doubt and self._doubt_expired(entry, mono):
                self._give_up(entry, IN_DOUBT_TIMEOUT, self._doubt_detail(entry, mono))
                continue
            try:
                frame = self._frame(entry, link)
            except MessageTooLarge as e:
                self._give_up(entry, MESSAGE_TOO_LARGE, f"{self.url} cannot take it: {e}")
                continue
            except Exception as e:  # a transformer bug: this message cannot be sent
                log.exception("bridge %s: cannot encode message %d", self.spec.name, tag)
                self._give_up(entry, "transformer-error", repr(e))
                continue
            link.forward(str(tag), frame)
            entry.sent_on = self._conn
            if not entry.first_sent:
                entry.first_sent = mono
            if self._careful:
                self._careful_tag = tag
        if link.write_buffer_size() > WRITE_HIGH_WATER and not self._write_paused:
            session = self._session
            if session is not None:
                self._write_paused = True
                session.pause()
                self._drain_task = asyncio.get_running_loop().create_task(
                    self._drain(link, session)
                )

    async def _drain(self, link: BridgeLink, session: Session) -> None:
        await link.drain()
        if self._write_paused and session is self._session:
            self._write_paused = False
            if not self.paused:
                session.resume()

    def duplicate_id(self, msg: Message) -> str:
        """Stable across restarts of either side: message ids are stored with the message."""
        return f"{self.engine.node_name}/{self.spec.name}/{msg.id}"

    def _frame(self, entry: _Entry, link: BridgeLink) -> bytes:
        encoding = link.encoding
        if entry.frame is None or entry.version != encoding:
            msg = entry.message
            if self.transform is not None:
                msg = self.transform(msg.copy(msg.id))
            dup = self.duplicate_id(entry.message) if self.spec.duplicate_detection else None
            entry.frame = link.encode(msg, str(entry.tag), self.spec.forwarding_address, dup)
            entry.version = encoding
        return entry.frame

    # -- the remote's answers -----------------------------------------------------------------
    def _on_confirmed(self, rid: str) -> None:
        if not rid.isdigit():
            return
        tag = int(rid)
        entry = self._entries.pop(tag, None)
        session, consumer = self._session, self._consumer
        if entry is None or session is None or consumer is None:
            return
        careful = bool(self._careful)
        if careful:
            self._careful.discard(tag)
            if self._careful_tag == tag:
                self._careful_tag = None
        self._confirmed.append(tag)
        if not self._settle_scheduled:  # the receipts of one read are settled together
            self._settle_scheduled = True
            asyncio.get_running_loop().call_soon(self._settle_confirmed)
        self.forwarded += 1
        # the remote confirmed it: it is on the remote's disk
        emit_message(
            self.engine.events,
            FORWARDED,
            entry.message,
            self.spec.queue,
            peer=self.spec.remote_node,
        )
        self._progress = True
        if careful:
            self._pump()

    def _settle_confirmed(self) -> None:
        """Accept the confirmed messages: the ones older than every held message in one
        cumulative settlement (the usual case, receipts come in order), any others one by
        one.  The session then refills the window once, and the new deliveries are pumped."""
        self._settle_scheduled = False
        tags, self._confirmed = self._confirmed, []
        session, consumer = self._session, self._consumer
        if not tags or session is None or consumer is None or session.closed:
            return
        # unsettled at the core = held (self._entries, in delivery order) + confirmed
        oldest_held = next(iter(self._entries), None)
        head = [t for t in tags if oldest_held is None or t < oldest_held]
        with contextlib.suppress(ConsumerError):
            if head:
                session.settle(consumer, max(head), Outcome.ACCEPTED, cumulative=True)
            for t in tags:
                if oldest_held is not None and t > oldest_held:
                    session.settle(consumer, t, Outcome.ACCEPTED)

    def _on_refused(self, rid: str | None, text: str, reason: str | None) -> None:
        """The remote refused a message (``rid``), or something it did not name (None):
        a permanent ``reason`` dead-letters the message, a transient one (None) ends the link
        so the message is resent, in order, after a backoff."""
        link = self._link
        entry: _Entry | None = None
        if rid is not None and rid.isdigit():
            entry = self._entries.get(int(rid))
        elif rid is None and self._careful_tag is not None:  # the one message in flight
            entry = self._entries.get(self._careful_tag)
        if entry is not None and entry.sent_on == self._conn:
            if reason is not None:
                self._give_up(entry, reason, f"{self.url} refused it: {text}")
                self._progress = True  # the link is fine: redial at once
                if link is not None and not link.refusal_ends_link:
                    if self._careful:
                        self._pump()
                    return  # the link goes on with the next message
            self._link_error = f"remote ERROR for message {entry.message.id}: {text}"
        else:
            if reason is not None:  # possibly about one message: find it, one at a time
                self._careful = {t for t, e in self._entries.items() if e.sent_on == self._conn}
            self._link_error = f"remote ERROR: {text}"
        if link is not None:
            link.close(self._link_error)

    # -- giving messages up -----------------------------------------------------------------
    def _give_up(self, entry: _Entry, reason: str, detail: str) -> None:
        tag = entry.tag
        self._entries.pop(tag, None)
        self._careful.discard(tag)
        if self._careful_tag == tag:
            self._careful_tag = None
        session, consumer = self._session, self._consumer
        if session is None or consumer is None:
            return
        try:
            session.settle(consumer, tag, Outcome.REJECTED, reason=reason, detail=detail)
        except ConsumerError:
            return
        self.dead_lettered += 1
        m = entry.message
        log.warning(
            "bridge %s: message %d for %s dead-lettered (%s): %s",
            self.spec.name,
            m.id,
            self.spec.remote_node,
            reason,
            detail,
        )

    def _waited_too_long(self, entry: _Entry, at_ms: int) -> bool:
        """Routing timeout: never sent, and waiting longer than allowed while the link is down."""
        t = self.spec.routing_timeout
        if t is None or entry.first_sent:
            return False
        return at_ms - max(entry.message.timestamp, self._down_since_ms) > t * 1000

    def _expire(self, entry: _Entry) -> None:
        waited = (now_ms() - max(entry.message.timestamp, self._down_since_ms)) / 1000
        if self._auth_refused:
            reason = REMOTE_AUTHENTICATION
            detail = f"{self.spec.remote_node} refused the bridge's credentials for {waited:.1f}s"
        else:
            reason = ROUTING_TIMEOUT
            detail = f"no link to {self.spec.remote_node} for {waited:.1f}s"
        if self.last_error:
            detail += f" (last error: {self.last_error})"
        self._give_up(entry, reason, detail)

    def _doubt_expired(self, entry: _Entry, mono: float) -> bool:
        t = self.spec.in_doubt_timeout
        return t is not None and entry.in_doubt and mono - entry.first_sent > t

    def _doubt_detail(self, entry: _Entry, mono: float) -> str:
        return (
            f"sent to {self.spec.remote_node} {mono - entry.first_sent:.1f}s ago and never "
            f"confirmed (in-doubt timeout {self.spec.in_doubt_timeout:g}s)"
        )

    async def _watch(self) -> None:
        """While the link is down, dead-letter held messages past a routing or in-doubt timeout."""
        limits = [t for t in (self.spec.routing_timeout, self.spec.in_doubt_timeout) if t]
        if not limits:
            return
        period = min(1.0, max(0.05, min(limits) / 4))
        while True:
            await asyncio.sleep(period)
            if self._link is not None or not self._entries:
                continue
            at_ms = now_ms()
            mono = time.monotonic()
            for entry in list(self._entries.values()):
                if entry.tag not in self._entries:
                    continue
                if self._doubt_expired(entry, mono):
                    self._give_up(entry, IN_DOUBT_TIMEOUT, self._doubt_detail(entry, mono))
                elif self._waited_too_long(entry, at_ms):
                    self._expire(entry)

    # -- state ------------------------------------------------------------------------------
    def _set_state(self, state: str) -> None:
        if state == self.state:
            return
        self.state = state
        name = self.spec.name
        if state == CONNECTED:
            log.info(
                "bridge %s: connected to %s (node %s; %d messages held)",
                name,
                self.url,
                self.spec.remote_node,
                len(self._entries),
            )
        elif state == RETRYING:
            log.warning(
                "bridge %s: retrying at %s: %s",
                name,
                _iso(self.next_attempt),
                self.last_error,
            )
        elif state == CONNECTING:
            log.debug("bridge %s: connecting", name)
        else:
            log.info("bridge %s: %s", name, state)

    def status(self) -> dict[str, object]:
        session = self._session
        q = session.lookup_queue(self.spec.queue) if session is not None else None
        link = self._link
        return {
            "name": self.spec.name,
            "remote_node": self.spec.remote_node,
            "queue": self.spec.queue,
            "state": self.state,
            "paused": self.paused,
            "url": self.url if link is not None else None,
            "next_attempt": _iso(self.next_attempt) if self.state == RETRYING else None,
            "in_flight": len(self._entries),
            "unconfirmed": sum(1 for e in self._entries.values() if e.sent_on == self._conn)
            if link is not None
            else 0,
            "waiting": q.depth if q is not None else 0,
            "forwarded": self.forwarded,
            "failed": self.failed,
            "dead_lettered": self.dead_lettered,
            "last_error": self.last_error,
        }


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
