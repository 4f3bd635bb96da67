"""An AMQP 1.0 connection for a bridge: proton's engine driven sans-I/O over the
dialled stream (amqp:// is tcp, amqps:// TLS; through the proxy when one is set).

``AmqpLink.open`` dials, runs SASL (PLAIN with the bridge's user, else ANONYMOUS), opens the
connection, one session and one sender, and returns once the remote attached it.  Between
Waystation nodes the sender uses the anonymous relay (each message's ``to`` names its
address, so one link carries every destination and a refusal is per message); a foreign
broker gets a sender to the fixed ``amqp_target``, or for an inbound bridge a receiver from
``amqp_source`` (``receive``, ``on_message``, ``accept`` once stored locally).  A foreign
link's terminus is durable: RabbitMQ 3.10 declares the queue of ``/queue/<q>`` with the
terminus's durability, and a non-durable queue loses its messages when RabbitMQ restarts.  Each message is an unsettled transfer
tagged with the bridge's confirmation id; ``accepted`` confirms it (a Waystation node sends
it only once a durable message is on disk), ``rejected`` refuses it with a dead-letter
reason from the error condition, ``released``/``modified`` are transient refusals.

Node identity: the open frame's properties carry ``ws-node`` both ways, like the STOMP
header; a remote answering with another name (or none) is refused.  Liveness is AMQP's
idle-timeout: proton declares the link dead after ``liveness`` seconds of silence and asks
the remote to send empty frames often enough.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import uuid
from collections.abc import Callable
from typing import Any

from proton import (
    Collector,
    Condition,
    Connection,
    Delivery,
    Endpoint,
    Event,
    Link,
    Receiver,
    Sender,
    Terminus,
    Transport,
    symbol,
)

from waystation.bridges.dial import READ_CHUNK, Target, dial
from waystation.bridges.link import (
    Confirmed,
    ConnectRefused,
    LinkOptions,
    Refused,
    _ignore_confirmed,
    _ignore_refused,
)
from waystation.bridges.outgoing import SOURCE_DUPLICATE_ID, destination
from waystation.bridges.reasons import classify_error
from waystation.core.message import (
    DESTINATION,
    DUPLICATE_ID,
    ORIGINAL_ADDRESS,
    ROUTE_TO_NODE,
    Message,
    now_ms,
)
from waystation.core.reasons import (
    INVALID_REMOTE_DESTINATION,
    MESSAGE_TOO_LARGE,
    REMOTE_AUTHORIZATION,
    REMOTE_REJECTED,
)
from waystation.gateway.amqp import pn
from waystation.gateway.amqp.mapping import TRACE_PROPERTY, encode_message
from waystation.gateway.amqp.session import NODE_PROPERTY

log = logging.getLogger("waystation.bridge.link")

# AMQP error conditions -> dead-letter reasons; the ones not listed are read by their text
_CONDITIONS = {
    "amqp:not-found": INVALID_REMOTE_DESTINATION,
    "amqp:unauthorized-access": REMOTE_AUTHORIZATION,
    "amqp:link:message-size-exceeded": MESSAGE_TOO_LARGE,
    "amqp:invalid-field": REMOTE_REJECTED,
    "amqp:decode-error": REMOTE_REJECTED,
    "amqp:not-implemented": REMOTE_REJECTED,
    "amqp:precondition-failed": REMOTE_REJECTED,
}
# transient: store trouble, a full address, a remote shutting down
_TRANSIENT = frozenset(
    (
        "amqp:internal-error",
        "amqp:resource-limit-exceeded",
        "amqp:connection:forced",
        "amqp:link:detach-forced",
        "amqp:resource-locked",
    )
)


def classify_condition(name: str | None, description: str | None) -> str | None:
    """The dead-letter reason for a transfer the remote rejected with this condition; None
    when the refusal is transient and the message should be resent after a backoff."""
    text = description or ""
    if name in _TRANSIENT:
        reason = classify_error(text) if "too large" in text.lower() else None
        return reason
    reason = _CONDITIONS.get(name or "")
    if reason is not None:
        return reason
    return classify_error(f"{name or ''} {text}")


def condition_text(cond: Condition | None, default: str) -> str:
    if cond is None:
        return default
    return f"{cond.name}: {cond.description}" if cond.description else str(cond.name)


def bridge_payload(
    msg: Message, confirm_id: str, forwarding_address: str | None, duplicate_id: str | None
) -> bytes:
    """The transfer payload for ``msg``, encoded the way the node's AMQP adapter reads it
    back (gateway/amqp/mapping.py): body sections byte for byte, typed properties, standard
    fields, the trace id, ``to`` = where it goes; ``duplicate_id`` takes ``_WS_DUPL_ID`` and a user's own
    duplicate id travels on as ``_WS_SRC_DUPL_ID`` (as over STOMP)."""
    m = msg.copy(msg.id, destination(msg, forwarding_address))
    ann = dict(msg._ann) if msg._ann else {}
    routed = ROUTE_TO_NODE in ann
    for k in (ROUTE_TO_NODE, DESTINATION):
        ann.pop(k, None)
    if routed:
        ann.pop(ORIGINAL_ADDRESS, None)
    if duplicate_id is not None:
        props = dict(msg.application_properties)
        own = props.pop(DUPLICATE_ID, None)
        m.properties = props
        # as annotations the mapping writes them over a kept application-properties section
        if own is not None:
            ann[SOURCE_DUPLICATE_ID] = own
        ann[DUPLICATE_ID] = duplicate_id
    if msg.trace_id is not None:
        ann[TRACE_PROPERTY] = msg.trace_id
    m._ann = ann or None
    return encode_message(m, 1, now_ms())


class AmqpLink:
    """One connected AMQP sender as a bridge's :class:`~waystation.bridges.link.BridgeLink`."""

    encoding = "amqp"
    refusal_ends_link = False  # a rejected transfer leaves the link up

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        options: LinkOptions,
        target: Target,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.options = options
        self.target = target
        self.on_confirmed: Confirmed = _ignore_confirmed
        self.on_refused: Refused = _ignore_refused
        self.loop = asyncio.get_running_loop()
        self.closed: asyncio.Future[str] = self.loop.create_future()
        self.remote_node: str | None = None
        self._ready: asyncio.Future[None] = self.loop.create_future()
        self._ended = False
        self._closing = False
        self._attach_error: str | None = None  # the remote refused the link while opening
        self._flush_scheduled = False
        self._tick: asyncio.TimerHandle | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._transport_error: str | None = None
        conn = self.conn = Connection()
        self.collector = Collector()
        conn.collect(self.collector)
        t = self.transport = Transport()
        t.max_frame_size = 256 * 1024
        if options.liveness > 0:
            t.idle_timeout = options.liveness
        sasl = t.sasl()
        if options.login is not None:
            sasl.allowed_mechs("PLAIN")
            sasl.allow_insecure_mechs = True  # a plain tcp link is the operator's choice
            conn.user = options.login
            conn.password = options.passcode or ""
        else:
            sasl.allowed_mechs("ANONYMOUS")
        t.bind(conn)
        conn.container = options.client_id or f"waystation-bridge-{uuid.uuid4()}"
        conn.hostname = target.host
        if options.node:
            conn.properties = {symbol(NODE_PROPERTY): options.node}
        conn.open()
        ssn = conn.session()
        ssn.open()
        self.link: Sender | Receiver
        if options.amqp_source is not None:  # an inbound bridge: a receiver, credit later
            rcv = ssn.receiver(f"bridge-{uuid.uuid4()}")
            rcv.source.address = options.amqp_source
            rcv.source.durability = Terminus.DELIVERIES  # RabbitMQ 3.x: a durable queue
            if options.client_id:
                rcv.target.address = options.client_id
            rcv.snd_settle_mode = Link.SND_UNSETTLED
            rcv.rcv_settle_mode = Link.RCV_FIRST
            self.link = rcv
        else:
            snd = ssn.sender(f"bridge-{uuid.uuid4()}")
            if options.amqp_target is not None:  # else the anonymous relay (a null target)
                snd.target.address = options.amqp_target
                snd.target.durability = Terminus.DELIVERIES  # RabbitMQ 3.x: a durable queue
            if options.client_id:
                snd.source.address = options.client_id
            snd.snd_settle_mode = Link.SND_UNSETTLED
            self.link = snd
        self.link.open()
        self._ptr = self.link._impl
        # inbound: each complete transfer's payload and its delivery (for ``accept``)
        self.on_message: Callable[[bytes, Delivery], None] = _drop

    # -- opening --------------------------------------------------------------------------
    @classmethod
    async def open(cls, target: Target, options: LinkOptions) -> AmqpLink:
        """Dial, log in, open and attach, all within ``options.connect_timeout``.

        Raises OSError (and TimeoutError) when the remote cannot be reached, ConnectRefused
        when it refuses the login, the connection or the sender, or names the wrong node."""
        async with asyncio.timeout(options.connect_timeout or None):
            reader, writer = await dial(target, options.liveness or options.connect_timeout or 30.0)
            try:
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                link = cls(reader, writer, options, target)
                link._tasks = [link.loop.create_task(link._read_loop())]
                link._flush()
                try:
                    await asyncio.shield(link._ready)
                except BaseException:
                    link._end("open failed")
                    await link.wait_closed(0.1)
                    raise
            except BaseException:
                writer.close()
                raise
        return link

    def _opened(self) -> None:
        """After each batch of events while opening: ready once the remote attached the sender
        (a refused attach comes as attach + detach in one batch)."""
        if self._attach_error is not None and not self._ready.done():
            kind = "receiver" if isinstance(self.link, Receiver) else "sender"
            self._fail_open(ConnectRefused(f"{kind} refused: {self._attach_error}"))
            self._end(self._attach_error)
            return
        if self._ready.done() or not self.link.state & Endpoint.REMOTE_ACTIVE:
            return
        if not self.conn.state & Endpoint.REMOTE_ACTIVE:
            return
        expect = self.options.expect_node
        if expect is not None and self.remote_node != expect:
            is_ = f"is node {self.remote_node!r}" if self.remote_node else "names no node"
            self._fail_open(
                ConnectRefused(
                    f"wrong node: {self.target} {is_}, this bridge is to {expect!r}",
                    "check the bridge's url and remote_node",
                )
            )
            self._end("wrong node")
            return
        self._ready.set_result(None)
        if self.options.liveness > 0:
            self._arm_tick()

    def _fail_open(self, e: BaseException) -> None:
        if not self._ready.done():
            self._ready.set_exception(e)

    # -- input ----------------------------------------------------------------------------
    async def _read_loop(self) -> None:
        try:
            while not self._ended:
                data = await self.reader.read(READ_CHUNK)
                if not data:
                    self._lost("connection closed by the remote")
                    return
                self._push(data)
        except (OSError, EOFError) as e:
            self._lost(
                f"connection lost: {e}" if str(e) else f"connection lost ({type(e).__name__})"
            )
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bug in an answer handler must still end the link cleanly
            log.exception("link %s: input handling failed", self.target)
            self._lost(f"internal error: {e!r}")

    def _lost(self, reason: str) -> None:
        if self._transport_error is None and self.transport.condition is not None:
            self._on_transport_error(None)  # e.g. a refused login: SASL outcome, then EOF
        reason = self._transport_error or reason
        self._fail_open(ConnectionResetError(reason))
        self._end(reason)

    def _push(self, data: bytes) -> None:
        t = self.transport
        while data and not self._ended:
            cap = t.capacity()
            if cap <= 0:
                break
            chunk, data = data[:cap], data[cap:]
            t.push(chunk)
            self._process()
        if not self._ended:
            self._process()
            self._flush()

    def _process(self) -> None:
        col = self.collector
        while not self._ended:
            ev = col.peek()
            if ev is None:
                break
            t = ev.type
            if t == Event.DELIVERY:
                d = ev.delivery
                if d is not None:
                    self._delivery(d)
            else:
                h = self._handlers.get(t)
                if h is not None:
                    h(self, ev)
            col.pop()
        if not self._ready.done() and not self._ended:
            self._opened()

    def _delivery(self, d: Delivery) -> None:
        if d.link._impl != self._ptr:
            return
        if isinstance(self.link, Receiver):
            if not d.readable or d.partial:
                return
            payload = pn.recv(self._ptr, d.pending)
            pn.advance(self._ptr)
            if d.aborted:
                d.settle()
                return
            self.on_message(payload, d)
            return
        if not d.updated:  # (``settled`` is the remote's: a node settles as it answers)
            return
        state = d.remote_state
        tag = pn.tag(d._impl).decode("ascii", "replace")
        if state == Delivery.ACCEPTED:
            d.settle()
            self.on_confirmed(tag)
        elif state == Delivery.REJECTED:
            cond = d.remote.condition
            d.settle()
            text = condition_text(cond, "rejected")
            name = cond.name if cond is not None else None
            desc = cond.description if cond is not None else None
            self.on_refused(tag, text, classify_condition(name, desc))
        elif state in (Delivery.RELEASED, Delivery.MODIFIED):
            d.settle()
            what = "released" if state == Delivery.RELEASED else "modified"
            self.on_refused(tag, f"the remote {what} the message", None)

    def _on_connection_remote_open(self, ev: Event) -> None:
        props = self.conn.remote_properties or {}
        remote = props.get(symbol(NODE_PROPERTY))
        self.remote_node = str(remote) if remote is not None else None
        # checked once the sender is attached (_opened): a remote that refuses the connection
        # opens and closes it at once, and its reason must win over "names no node"

    def _on_connection_remote_close(self, ev: Event) -> None:
        text = condition_text(self.conn.remote_condition, "the remote closed the connection")
        self._fail_open(ConnectRefused(text))
        self._end(f"remote closed the connection: {text}")

    def _on_link_remote_close(self, ev: Event) -> None:
        if ev.link is None or ev.link._impl != self._ptr:
            return
        cond = self.link.remote_condition
        text = condition_text(cond, "the remote detached the link")
        if not self._ready.done():  # decided after the batch: a connection close wins
            self._attach_error = text
            return
        reason = classify_condition(cond.name, cond.description) if cond is not None else None
        self.on_refused(None, text, reason)  # about the message in flight, if only one
        self._end(f"remote detached the link: {text}")

    def _on_transport_error(self, ev: Event | None) -> None:
        cond = self.transport.condition
        text = condition_text(cond, "transport error")
        self._transport_error = text
        if not self._ready.done():
            low = text.lower()
            if "unauthorized" in low or "authentication" in low or "sasl" in low:
                self._fail_open(ConnectRefused(f"authentication failed: {text}"))
            else:
                self._fail_open(ConnectionError(text))

    def _on_transport_closed(self, ev: Event) -> None:
        self._lost(self._transport_error or "transport closed")

    _handlers: dict[Any, Any] = {
        Event.CONNECTION_REMOTE_OPEN: _on_connection_remote_open,
        Event.CONNECTION_REMOTE_CLOSE: _on_connection_remote_close,
        Event.LINK_REMOTE_CLOSE: _on_link_remote_close,
        Event.LINK_REMOTE_DETACH: _on_link_remote_close,
        Event.TRANSPORT_ERROR: _on_transport_error,
        Event.TRANSPORT_CLOSED: _on_transport_closed,
    }

    # -- timers: AMQP idle-timeout ----------------------------------------------------------
    def _arm_tick(self) -> None:
        if self._tick is None and not self._ended:
            deadline = self.transport.tick(self.loop.time())
            if deadline:
                self._tick = self.loop.call_at(deadline, self._on_tick)

    def _on_tick(self) -> None:
        self._tick = None
        if self._ended:
            return
        self.transport.tick(self.loop.time())
        self._process()
        self._flush()
        self._arm_tick()

    # -- output ---------------------------------------------------------------------------
    def encode(
        self,
        msg: Message,
        confirm_id: str,
        forwarding_address: str | None,
        duplicate_id: str | None,
    ) -> bytes:
        return bridge_payload(msg, confirm_id, forwarding_address, duplicate_id)

    def forward(self, confirm_id: str, payload: bytes) -> None:
        if self._ended:
            return
        pn.send(self._ptr, confirm_id.encode(), payload)
        self._flush_soon()

    def _flush_soon(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    # -- inbound: a receiver with a window of credit ---------------------------------------
    def receive(self, window: int) -> None:
        """Start taking messages: ``window`` of them unaccepted at most."""
        if isinstance(self.link, Receiver) and not self._ended:
            self.link.flow(window)
            self._flush_soon()

    def accept(self, d: Delivery) -> None:
        """The message is stored here: accept it there and take one more."""
        if self._ended:
            return
        d.update(Delivery.ACCEPTED)
        d.settle()
        self.link.flow(1)
        self._flush_soon()

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._ended:
            return
        t = self.transport
        out: list[bytes] = []
        while True:
            n = t.pending()
            if n <= 0:
                break
            data = t.peek(n)
            if data is None:
                break
            out.append(data)
            t.pop(n)
        if out:
            try:
                self.writer.write(b"".join(out))
            except (OSError, RuntimeError) as e:
                self._end(f"write failed: {e}")
                return
        if (
            n < 0 and self._ready.done() and not self._closing
        ):  # proton wrote its last byte (a close or an error)
            self._lost(self._transport_error or "connection closed")

    def write_buffer_size(self) -> int:
        transport = self.writer.transport
        return 0 if transport.is_closing() else transport.get_write_buffer_size()

    async def drain(self) -> None:
        """Wait until the socket's write buffer is below its high-water mark."""
        self._flush()
        with contextlib.suppress(OSError, RuntimeError):
            await self.writer.drain()

    # -- closing --------------------------------------------------------------------------
    def close(self, reason: str = "closed") -> None:
        """End the link (idempotent), politely: an AMQP close goes out first."""
        if self._ended:
            return
        self._closing = True  # the close's own end of output is not a lost connection
        with contextlib.suppress(Exception):
            if not self.conn.state & Endpoint.LOCAL_CLOSED:
                self.conn.close()
            self._flush()
        self._end(reason)

    def _end(self, reason: str) -> None:
        if self._ended:
            return
        self._ended = True
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None
        if not self.closed.done():
            self.closed.set_result(reason)
        with contextlib.suppress(Exception):
            self.writer.close()
        current = asyncio.current_task()
        for t in self._tasks:
            if t is not current:
                t.cancel()

    async def wait_closed(self, grace: float = 1.0) -> None:
        """Wait for the reader task and the socket; a peer that does not take the last bytes
        within ``grace`` seconds gets a reset instead."""
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        try:
            await asyncio.wait_for(self.writer.wait_closed(), grace)
        except Exception:
            self.writer.transport.abort()


def _drop(payload: bytes, d: Delivery) -> None:
    return None


__all__ = ["AmqpLink", "bridge_payload", "classify_condition"]
