"""Bridges to and from a foreign broker (STOMP: ActiveMQ, RabbitMQ; AMQP 1.0: RabbitMQ's
plugin): at-least-once both ways.

* ``ForeignStompBridge`` (outbound) is a core bridge: the same window, receipts, ordered
  resends, reconnect/backoff/failover and liveness.  A foreign broker ignores
  ``_WS_DUPL_ID``, so a resend after a lost receipt may be stored twice: at-least-once.  The
  header is still sent, so a consumer there can drop the copies itself.  The bridge sends no
  ``client-id`` (ActiveMQ would refuse a reconnect while it still holds the old connection).
  The forwarding address is used as the STOMP destination as written (``/queue/orders``).
  Over AMQP (``foreign = "amqp"``) it is the sender's target address (RabbitMQ 3.10:
  ``/amq/queue/<q>``, ``/queue/<q>``, ``/exchange/<x>/<key>``) and a message is settled
  locally only on the broker's ``accepted``.
* ``ForeignInbound`` subscribes to ``source`` with ``ack:client-individual`` and a prefetch of
  ``confirmation_window``; each MESSAGE becomes a durable local message on
  ``forwarding_address`` (its non-protocol headers become properties) and is ACKed on the
  foreign broker only once the local write is on disk.  It sends through one core session
  opened with the node's own principal (``SYSTEM``), listed with the engine's sessions while
  the bridge runs.  A lost link or a failed local write leaves the un-ACKed messages with the
  foreign broker, which redelivers them on the next connection: nothing is lost, duplicates
  are possible.  Over AMQP it is the same with a receiver from ``source``: credit of
  ``confirmation_window``, each transfer mapped as the node's AMQP adapter maps it (typed
  properties, body sections) and ``accepted`` only once stored; what is unaccepted when the
  link drops goes back to the broker.
* Pausing an inbound bridge holds what arrives (at most the window) without storing or
  acknowledging it; the link stays up and ``resume`` stores the held ones in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from waystation.bridges.core_bridge import SESSION_PROTOCOL, CoreBridge, _iso
from waystation.bridges.dial import Target
from waystation.bridges.link import BridgeLink
from waystation.bridges.redial import (
    CONNECTED,
    CONNECTING,
    RETRYING,
    STOPPED,
    Redialing,
    describe,
    link_options,
)
from waystation.bridges.spec import BridgeSpec
from waystation.bridges.stomp_link import StompLink, error_text
from waystation.core.message import DEFAULT_PRIORITY, Message, PropertyValue, now_ms
from waystation.core.security import SYSTEM
from waystation.core.session import Session
from waystation.gateway.stomp.mapping import TRACE_HEADER
from waystation.wire.stomp import Frame

if TYPE_CHECKING:
    from waystation.bridges.amqp_link import AmqpLink
    from waystation.core.engine import Engine

log = logging.getLogger("waystation.bridge")

# the foreign broker's message id, kept as a property of the local copy
FOREIGN_MESSAGE_ID = "_WS_FOREIGN_MESSAGE_ID"
# MESSAGE headers that describe the delivery, not the message
_PROTOCOL_HEADERS = frozenset(
    (
        "destination",
        "subscription",
        "message-id",
        "ack",
        "content-length",
        "content-type",
        "receipt",
        "redelivered",
        "persistent",
        "priority",
        "expires",
        "timestamp",
        TRACE_HEADER,
    )
)
SUBSCRIPTION_ID = "ws-inbound"


class ForeignStompBridge(CoreBridge):
    """Outbound into a foreign STOMP or AMQP broker: a core bridge without remote duplicate
    detection."""

    def __init__(self, engine: Engine, spec: BridgeSpec) -> None:
        super().__init__(engine, spec)
        # no client-id: ActiveMQ refuses a reconnect while it still holds the old connection
        target = spec.forwarding_address if spec.foreign == "amqp" else None
        self._options = link_options(spec, amqp_target=target)

    def _session_remote(self) -> str:
        return _first_url(self.spec)

    def status(self) -> dict[str, object]:
        out = super().status()
        out["foreign"] = self.spec.foreign
        out["direction"] = "outbound"
        return out


class ForeignInbound(Redialing):
    """Consumes a foreign STOMP or AMQP source into a local address, at least once."""

    def __init__(self, engine: Engine, spec: BridgeSpec) -> None:
        if not spec.source or not spec.forwarding_address:
            raise ValueError(f"bridge {spec.name}: an inbound bridge needs a source and an address")
        self.engine = engine
        self.spec = spec
        self.source: str = spec.source
        self.address: str = spec.forwarding_address
        self.state = STOPPED
        self.url: str | None = None
        self.next_attempt: float | None = None
        self.received = 0  # MESSAGE frames taken in
        self.forwarded = 0  # stored locally and ACKed to the foreign broker
        self.failed = 0  # failed connection attempts and lost links
        self.last_error: str | None = None
        amqp_source = spec.source if spec.foreign == "amqp" else None
        self._options = link_options(spec, amqp_source=amqp_source)
        self._link: BridgeLink | None = None
        self.paused = False
        self._held: list[tuple[Callable[[], Message], Callable[[], None]]] = []
        self._session: Session | None = None
        self._pending = 0  # local writes not yet on disk, on the current link
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._progress = False
        self._auth_refused = False

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        if not self._has_targets():
            return
        self._stopping = False
        if self._session is None or self._session.closed:
            self._session = self.engine.open_session(
                SYSTEM, SESSION_PROTOCOL, _first_url(self.spec), client_id=self.spec.name
            )
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Close the link; un-ACKed messages stay with (and are redelivered by) the remote."""
        self._stopping = True
        task, self._task = self._task, None
        link = self._link
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if link is not None:
            link.close("bridge stopping")
            await link.wait_closed()
        self._link = None
        session, self._session = self._session, None
        if session is not None:
            session.close()
        self.next_attempt = None
        self._set_state(STOPPED)

    def _gave_up(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            session.close()

    # -- the connection loop ----------------------------------------------------------------
    async def _run(self) -> None:
        await self._connection_loop()

    async def _serve(self, link: BridgeLink, target: Target) -> None:
        self._link = link
        self._pending = 0
        self._held.clear()  # taken on the old link: the remote redelivers them
        self._progress = False
        self.url = str(target)
        started = time.monotonic()
        if isinstance(link, StompLink):
            self._subscribe(link)
        else:  # AMQP (imported with the first AMQP link: proton is big)
            amqp: AmqpLink = link  # type: ignore[assignment]
            amqp.on_message = lambda payload, d: self._on_transfer(amqp, payload, d)
            amqp.receive(self.spec.window)
        self._set_state(CONNECTED)
        try:
            reason = await asyncio.shield(link.closed)
        finally:
            if self._link is link:
                self._link = None
            link.close("bridge stopping")
        self.last_error = reason
        if time.monotonic() - started >= self.spec.retry.interval:
            self._progress = True
        log.info(
            "bridge %s: link to %s lost: %s (%d received, %d stored and acked, %d writes pending)",
            self.spec.name,
            target,
            reason,
            self.received,
            self.forwarded,
            self._pending,
        )
        await link.wait_closed()

    def _subscribe(self, link: StompLink) -> None:
        link.on_frame = lambda frame: self._on_frame(link, frame)
        window = str(self.spec.window)
        link.send_frame(
            "SUBSCRIBE",
            {
                "id": SUBSCRIPTION_ID,
                "destination": self.source,
                "ack": "client-individual" if link.version != "1.0" else "client",
                "activemq.prefetchSize": window,  # ActiveMQ
                "prefetch-count": window,  # RabbitMQ
            },
        )

    # -- pausing ----------------------------------------------------------------------------
    def pause(self) -> None:
        """Store nothing more (what arrives is held, unacknowledged, up to the window: the
        broker then stops sending); the link stays up."""
        self.paused = True
        log.info("bridge %s: paused", self.spec.name)

    def resume(self) -> None:
        self.paused = False
        held, self._held = self._held, []
        link = self._link
        log.info("bridge %s: resumed (%d held messages)", self.spec.name, len(held))
        if link is None:
            return
        for build, ack in held:
            self._take(link, build, ack)

    # -- messages -------------------------------------------------------------------------
    def _on_transfer(self, link: AmqpLink, payload: bytes, d: Any) -> None:
        from waystation.gateway.amqp.mapping import message_from_transfer

        self.received += 1

        def build() -> Message:
            msg, _ = message_from_transfer(payload, self.engine.ids(), self.address, now_ms())
            msg.durable = True
            return msg

        self._take(link, build, lambda: link.accept(d))

    def _on_frame(self, link: StompLink, frame: Frame) -> None:
        if frame.command == "ERROR":
            link.close(f"remote ERROR: {error_text(frame)}")
        elif frame.command == "MESSAGE":
            self._on_message(link, frame)

    def _on_message(self, link: StompLink, frame: Frame) -> None:
        h = frame.headers
        self.received += 1
        ack = _ack_headers(link.version, h)

        def build() -> Message:
            msg = self.engine.make_message(
                self.address,
                frame.body,
                _properties(h),
                durable=True,
                priority=_int(h.get("priority"), DEFAULT_PRIORITY, 0, 9),
                expiration=_int(h.get("expires"), 0, 0, None),
            )
            trace = h.get(TRACE_HEADER)
            if trace and len(trace) <= 256:  # relayed from a Waystation node: keep its trace
                msg.trace_id = trace
            return msg

        self._take(link, build, lambda: link.send_frame("ACK", ack))

    def _take(
        self, link: BridgeLink, build: Callable[[], Message], ack: Callable[[], None]
    ) -> None:
        """Store one message taken from the remote; acknowledge it there once on disk."""
        if self.paused:
            self._held.append((build, ack))
            return
        session = self._session
        if session is None:  # stopping: the remote redelivers it on the next link
            link.close("bridge stopping")
            return
        try:
            fut = session.send(build())
        except Exception as e:  # not stored: the remote redelivers it on the next link
            log.exception("bridge %s: storing a message from %s failed", self.spec.name, self.url)
            link.close(f"local store refused a message: {describe(e)}")
            return
        if fut is None:
            self._acked(link, ack)
            return
        self._pending += 1
        fut.add_done_callback(lambda f: self._stored(link, ack, f))

    def _stored(self, link: BridgeLink, ack: Callable[[], None], fut: asyncio.Future[None]) -> None:
        if link is self._link:
            self._pending -= 1
        exc = None if fut.cancelled() else fut.exception()
        if fut.cancelled() or exc is not None:
            why = describe(exc) if exc is not None else "cancelled"
            link.close(f"local write failed: {why}")  # the remote redelivers what is un-ACKed
            return
        self._acked(link, ack)

    def _acked(self, link: BridgeLink, ack: Callable[[], None]) -> None:
        if link is not self._link:
            return  # the link is gone: the remote redelivers this one, a duplicate locally
        ack()
        self.forwarded += 1
        self._progress = True

    # -- state ------------------------------------------------------------------------------
    def _set_state(self, state: str) -> None:
        if state == self.state:
            return
        self.state = state
        name = self.spec.name
        if state == CONNECTED:
            log.info("bridge %s: consuming %s at %s", name, self.source, self.url)
        elif state == RETRYING:
            log.warning(
                "bridge %s: retrying at %s: %s", name, _iso(self.next_attempt), self.last_error
            )
        elif state != CONNECTING:
            log.info("bridge %s: %s", name, state)

    def status(self) -> dict[str, object]:
        return {
            "name": self.spec.name,
            "remote_node": self.spec.remote_node,
            "foreign": self.spec.foreign,
            "direction": "inbound",
            "source": self.source,
            "address": self.address,
            "state": self.state,
            "paused": self.paused,
            "url": self.url if self._link is not None else None,
            "next_attempt": _iso(self.next_attempt) if self.state == RETRYING else None,
            "in_flight": self._pending,
            "received": self.received,
            "forwarded": self.forwarded,
            "failed": self.failed,
            "last_error": self.last_error,
        }


def _first_url(spec: BridgeSpec) -> str:
    """The session list's remote end of a foreign bridge: its first URL (no node name)."""
    return str(spec.targets[0]) if spec.targets else spec.remote_node


def _ack_headers(version: str, h: dict[str, str]) -> dict[str, str]:
    if version == "1.2":
        return {"id": h.get("ack", h.get("message-id", ""))}
    return {"message-id": h.get("message-id", ""), "subscription": h.get("subscription", "")}


def _properties(h: dict[str, str]) -> dict[str, PropertyValue]:
    props: dict[str, PropertyValue] = {k: v for k, v in h.items() if k not in _PROTOCOL_HEADERS}
    if "message-id" in h:
        props[FOREIGN_MESSAGE_ID] = h["message-id"]
    return props


def _int(text: str | None, default: int, low: int, high: int | None) -> int:
    try:
        v = int(text) if text is not None else default
    except ValueError:
        return default
    v = max(low, v)
    return min(v, high) if high is not None else v
