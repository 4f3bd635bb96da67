"""One AMQP 1.0 connection: bytes in, proton's engine, core Session calls, bytes out.

Proton's ``Connection``/``Transport``/``Collector`` are the protocol state machine, driven
here without its reactor: input is pushed into the transport, the collector's events become
core calls (links.py, transactions.py), and the transport's output is written to the
``Link`` once per loop turn (a burst of deliveries is one write).  The SASL exchange in
front of it is ours (sasl.py), so a password is checked off the loop by the node's
authenticator.  A problem with one link detaches that link with an AMQP error condition; the
connection and its other links carry on.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from proton import (
    Collector,
    Condition,
    Connection,
    Endpoint,
    Event,
    Link,
    Terminus,
    Transport,
    symbol,
)

from waystation.core.authentication import authenticator
from waystation.core.engine import Engine
from waystation.core.limits import LimitExceeded
from waystation.core.message import now_ms
from waystation.core.security import AuthenticationError, NotAuthorized, Principal
from waystation.core.session import Session
from waystation.gateway.admission import certificate_subject
from waystation.gateway.amqp import errors, pn
from waystation.gateway.amqp.addresses import parse_address
from waystation.gateway.amqp.browser import Browser
from waystation.gateway.amqp.codec import DecodeError
from waystation.gateway.amqp.links import Producer, Subscriber, refuse
from waystation.gateway.amqp.sasl import (
    AMQP_HEADER,
    AUTH,
    SASL_HEADER,
    SYS_TEMP,
    Phase,
    SaslError,
    SaslServer,
    outcome_frame,
    plain_credentials,
)
from waystation.gateway.amqp.transactions import Coordinator, TransactionsMixin
from waystation.gateway.link import Link as ByteLink

if TYPE_CHECKING:
    from waystation.config.listeners import AmqpAcceptor

log = logging.getLogger("waystation.amqp")

CONTAINER_ID = "waystation"
# the open frame's properties: the node a bridge claims to be, and the node answering (the
# AMQP twin of STOMP's ``ws-node`` header)
NODE_PROPERTY = "ws-node"
ANONYMOUS_RELAY = "ANONYMOUS-RELAY"


@dataclass(slots=True)
class AmqpOptions:
    max_frame_size: int = 64 * 1024  # largest frame proton accepts and sends
    max_message_size: int = 10 * 1024 * 1024  # largest message a producer may send
    idle_timeout: float = 60.0  # seconds of silence before the connection is dropped
    credit_window: int = 5000  # credit issued to each producer link (topped up at half)
    max_sessions: int = 32  # AMQP sessions (channels) on one connection


def options_from(acceptor: AmqpAcceptor) -> AmqpOptions:
    """The options of one listener, from its ``[acceptors.amqp]`` table."""
    return AmqpOptions(
        max_frame_size=acceptor.max_frame_size,
        max_message_size=acceptor.max_message_size,
        idle_timeout=acceptor.idle_timeout.total_seconds(),
        credit_window=acceptor.credit_window,
        max_sessions=acceptor.max_sessions,
    )


class AmqpSession(TransactionsMixin):
    """The :class:`~waystation.gateway.adapter.StreamSession` of one AMQP connection."""

    def __init__(self, engine: Engine, link: ByteLink, options: AmqpOptions | None = None):
        self.engine = engine
        self.link = link
        self.peer = str(link.peer)
        self.options = options or AmqpOptions()
        self.connected = False
        self.closed = False
        self.paused_writing = False
        self.principal: Principal | None = None
        self.user: str | None = None  # the user id stamped on messages (security on)
        self.session: Session | None = None
        self.loop = asyncio.get_running_loop()
        anonymous = engine.anonymous_allowed
        # the subject of a TLS client certificate the listener verified (TCP links only)
        self.cert_subject = certificate_subject(getattr(link, "peer_certificate", None))
        mechanisms = ["ANONYMOUS", "PLAIN"] if anonymous else ["PLAIN"]
        if self.cert_subject is not None:
            mechanisms.insert(0, "EXTERNAL")
        self.sasl = SaslServer(mechanisms)
        self._held: bytearray | None = None  # input held while a login is checked
        self.conn = Connection()
        self.collector = Collector()
        self.conn.collect(self.collector)
        self._col = self.collector._impl
        self.links: dict[Any, Any] = {}  # raw pn_link_t -> Producer, Subscriber, Coordinator
        self.settling: list[Any] = []  # subscribers with accepts of this read to settle
        t = self.transport = Transport(Transport.SERVER)
        t.max_frame_size = self.options.max_frame_size
        t.channel_max = self.options.max_sessions - 1  # channels are numbered from 0
        if self.options.idle_timeout > 0:
            t.idle_timeout = self.options.idle_timeout
        t.bind(self.conn)
        self._ti = t._impl  # the raw pn_transport_t: input and output on the hot path
        self._flush_soon = False
        self.clock = 0  # now_ms() as of the input being handled (one read per call)
        self._tick: asyncio.TimerHandle | None = None
        self._relay: dict[str, tuple[str, str | None]] = {}
        self._init_transactions()

    # -- StreamSession: input ---------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if self._held is not None:
            self._held += data
            return
        try:
            if self.sasl.phase is not Phase.DONE:
                self._sasl_input(data)
            else:
                self._push(data)
        except SaslError as e:
            log.info("AMQP %s: SASL: %s", self.peer, e)
            self.close()
        except Exception:  # a bug must not take the node down: report, close this one
            log.exception("AMQP %s: internal error", self.peer)
            self.fail("internal error", "the node failed to process the input; see its log")

    def _sasl_input(self, data: bytes) -> None:
        """SASL input.  A client may pipeline its whole opening (SASL header, sasl-init, the
        AMQP header, ``open``, attaches, credit) in one write: what follows the sasl-init
        waits in the SASL buffer while the login is checked and is served once it succeeds
        (``_sasl_succeeded``); nothing of it is dropped."""
        out, init = self.sasl.feed(data)
        if out:
            self.link.write(out)
        if init is not None:
            self._login(*init)
            return
        if self.sasl.phase is Phase.DONE:
            rest, self.sasl.buf = bytes(self.sasl.buf), bytearray()
            if not self.sasl.sasl_used:  # the AMQP header straight away: no SASL
                if self.engine.secured:
                    self.link.write(SASL_HEADER)  # the header we would accept, then close
                    self.close()
                    return
                self._logged_in(self._authenticate_now(None, None))
            self._push(rest)

    def _push(self, data: bytes) -> None:
        """Input through proton, then output; the store writes of the burst are one journal
        batch (``Engine.begin_burst``)."""
        if type(data) is not bytes:
            data = bytes(data)  # cffi passes a bytes object's own buffer as ``const char *``
        engine = self.engine
        engine.begin_burst()
        try:
            ti = self._ti
            while data:
                n = pn.transport_push(ti, data, len(data))  # up to the transport's capacity
                if n <= 0:
                    break  # the transport takes no more input (closed): the rest is dropped
                data = data[n:] if n < len(data) else b""
                self._process()
                if self.closed:
                    return
            self._process()
        finally:
            if self.settling:  # the read's accepts, one core call per link (same burst)
                self._settle_accepted()
            engine.end_burst()
        self._flush()

    def _process(self) -> None:
        """Handle the collector's events: deliveries and flow on raw pointers (pn.py), the
        rest through proton's wrappers."""
        col = self._col
        peek, pop, etype = pn.collector_peek, pn.collector_pop, pn.event_type
        ev_delivery, delivery_link, readable, updated = (
            pn.event_delivery,
            pn.delivery_link,
            pn.readable,
            pn.updated,
        )
        flow = pn.LINK_FLOW
        handlers = self._handlers
        links = self.links
        self.clock = now_ms()  # the creation time of the messages of this input
        while True:
            ev = peek(col)
            if not ev:
                break
            d = ev_delivery(ev)  # NULL unless a delivery event (the one kind with a delivery)
            if d:
                state = links.get(delivery_link(d))
                if state is None:
                    self._stray(d)
                elif state.incoming:
                    if readable(d):
                        state.transfer(d)
                elif updated(d):
                    state.disposition(d)
                pop(col)
                if self.closed:
                    return
                continue
            t = etype(ev)
            if t == flow:
                state = links.get(pn.event_link(ev))
                if state is not None and not state.incoming:
                    state.flow()
            else:
                h = handlers.get(t)
                if h is not None:
                    h(self, Event.wrap(ev))
            pop(col)
            if self.closed:
                return

    def _stray(self, d: Any) -> None:
        """A transfer on a link already detached: dropped."""
        link = pn.delivery_link(d)
        if pn.is_receiver(link) and pn.readable(d) and not pn.partial(d):
            pn.recv(link, pn.pending(d))
            pn.advance(link)
            pn.settle(d)

    # -- output -----------------------------------------------------------------------------
    def _settle_accepted(self) -> None:
        subs, self.settling = self.settling, []
        for s in subs:
            s.settle_accepted()

    def want_flush(self) -> None:
        """Something was queued in proton outside of input handling: write it this turn."""
        if not self._flush_soon and not self.closed:
            self._flush_soon = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_soon = False
        if self.closed:
            return
        n = self._write_output()
        if n < 0:  # proton has written its last byte (close sent or transport failed)
            self._finish()
            return
        if self.options.idle_timeout > 0 and self.connected:
            self._arm_tick()

    def _write_output(self) -> int:
        """Write out everything proton has to send; returns its last pending() (< 0: the
        transport is done)."""
        ti = self._ti
        write = self.link.write
        while True:
            n = pn.transport_pending(ti)
            if n <= 0:
                return n
            write(pn.transport_take(ti, n))

    def _arm_tick(self) -> None:
        if self._tick is None:
            deadline = self.transport.tick(self.loop.time())
            if deadline:
                self._tick = self.loop.call_at(deadline, self._on_tick)

    def _on_tick(self) -> None:
        self._tick = None
        if self.closed:
            return
        self.transport.tick(self.loop.time())
        self._process()
        self._flush()

    def now(self) -> int:
        return now_ms()

    # -- login ------------------------------------------------------------------------------
    def _login(self, mechanism: str, response: bytes) -> None:
        if mechanism not in self.sasl.mechanisms:
            self._refuse_login(AUTH, f"mechanism {mechanism!r} not offered")
            return
        if mechanism == "EXTERNAL":  # the verified certificate is the login (no password)
            try:
                principal = authenticator(self.engine).certificate(self.cert_subject, self.peer)
            except AuthenticationError as e:
                self._refuse_login(AUTH, str(e))
                return
            self._logged_in(principal)
            self._sasl_succeeded()
            return
        login = passcode = None
        if mechanism == "PLAIN":
            login, passcode = plain_credentials(response)
        if not self.engine.secured:
            self._logged_in(self._authenticate_now(login, passcode))
            self._sasl_succeeded()
            return
        self._held = bytearray()
        self.link.pause_reading()
        auth = authenticator(self.engine)
        task = self.loop.create_task(auth.authenticate(login, passcode, self.peer))
        task.add_done_callback(self._authenticated)

    def _authenticate_now(self, login: str | None, passcode: str | None) -> Principal:
        return authenticator(self.engine).authenticate_blocking(login, passcode, self.peer)

    def _authenticated(self, task: asyncio.Task[Principal]) -> None:
        held, self._held = self._held, None
        # retrieved even when the connection is gone: asyncio logs an exception never
        # retrieved, with its traceback, and any client can cause one per wrong password
        e = None if task.cancelled() else task.exception()
        if self.closed:
            return
        if task.cancelled() or e is not None:
            if isinstance(e, AuthenticationError):
                self._refuse_login(AUTH, str(e))
            else:
                log.error("AMQP %s: login check failed: %r", self.peer, e)
                self._refuse_login(SYS_TEMP, "login check failed")
            return
        self._logged_in(task.result())
        self.link.resume_reading()
        if held:
            self.sasl.buf += held  # after what was read with the sasl-init
        self._sasl_succeeded()

    def _sasl_succeeded(self) -> None:
        """Send the successful outcome, then serve what the client sent behind its sasl-init
        without waiting for the outcome (the AMQP header, ``open`` ...)."""
        self.link.write(self.sasl.succeeded())
        if self.sasl.buf and not self.closed:
            self.data_received(b"")

    def _refuse_login(self, code: int, why: str) -> None:
        log.info("AMQP %s: login refused: %s", self.peer, why)
        self.link.write(outcome_frame(code))
        self.close()

    def _logged_in(self, principal: Principal) -> None:
        self.principal = principal
        self.user = principal.name if self.engine.secured else None

    # -- connection and session events ---------------------------------------------------
    def _on_connection_remote_open(self, ev: Event) -> None:
        conn = self.conn
        assert self.principal is not None
        try:  # the open's fields are read first: nothing is opened for one not decodable
            container = errors.decoded(lambda: conn.remote_container, "open: container-id")
            props = errors.decoded(lambda: conn.remote_properties, "open: properties")
            self.session = self.engine.open_session(
                self.principal, "amqp", self.peer, container or None
            )
        except (LimitExceeded, DecodeError) as e:  # spec 2.4.1: open, then close with why
            log.info("AMQP %s: open refused: %s", self.peer, e)
            conn.container = CONTAINER_ID  # mandatory in the open that goes before the close
            conn.condition = errors.condition(e)
            conn.open()
            conn.close()
            return
        claimed = props.get(symbol(NODE_PROPERTY)) if isinstance(props, dict) else None
        if claimed is not None:
            try:
                self.session.claim_node(str(claimed))
            except NotAuthorized as e:
                log.info("AMQP %s: %s", self.peer, e)
                self.session.close()
                self.session = None
                conn.condition = Condition(errors.UNAUTHORIZED, str(e))
                conn.open()
                conn.close()
                return
        conn.container = CONTAINER_ID
        conn.offered_capabilities = [ANONYMOUS_RELAY]
        conn.properties = {symbol(NODE_PROPERTY): self.engine.node_name}
        conn.open()
        self.connected = True

    def _on_connection_remote_close(self, ev: Event) -> None:
        self.conn.close()

    def _on_session_remote_open(self, ev: Event) -> None:
        assert ev.session is not None  # a session event carries its session
        if self.conn.state & Endpoint.LOCAL_CLOSED:
            return  # the open was refused: nothing is begun; the close ends it all
        ev.session.open()

    def _on_session_remote_close(self, ev: Event) -> None:
        ssn = ev.session
        assert ssn is not None
        link = self.conn.link_head(0)
        while link is not None:
            nxt = link.next(0)
            if link.session == ssn:
                self._release(link)
            link = nxt
        ssn.close()

    def _on_link_remote_open(self, ev: Event) -> None:
        link = ev.link
        assert link is not None  # a link event carries its link
        if self.conn.state & Endpoint.LOCAL_CLOSED:
            return  # the open was refused, or the node is closing: no answer after close
        if self.session is None:
            refuse(link, Condition(errors.UNAUTHORIZED, "the connection is not open"))
            return
        if link.is_sender:
            if link.remote_source.distribution_mode == Terminus.DIST_MODE_COPY:
                Browser.attach(self, link)
            else:
                Subscriber.attach(self, link)
        elif link.remote_target.type == Terminus.COORDINATOR:
            Coordinator.attach(self, link)
        else:
            Producer.attach(self, link)

    def _on_link_remote_close(self, ev: Event) -> None:
        assert ev.link is not None
        self._detached(ev.link, True)

    def _on_link_remote_detach(self, ev: Event) -> None:
        assert ev.link is not None
        self._detached(ev.link, False)

    def _detached(self, link: Link, closed: bool) -> None:
        state = self.links.pop(link._impl, None)
        if isinstance(state, (Subscriber, Browser)):
            state.detach(closed)
        elif state is not None:
            state.released()
        if link.state & Endpoint.LOCAL_ACTIVE:
            if closed:
                link.close()
            else:
                link.detach()

    def _release(self, link: Link) -> None:
        state = self.links.pop(link._impl, None)
        if state is not None:
            state.released()

    def _on_transport_error(self, ev: Event) -> None:
        cond = self.transport.condition
        if cond is not None:
            log.info("AMQP %s: %s: %s", self.peer, cond.name, cond.description)

    def _on_transport_closed(self, ev: Event) -> None:
        self._flush_output()
        self._finish()

    _handlers: dict[int, Any] = {
        Event.CONNECTION_REMOTE_OPEN.number: _on_connection_remote_open,
        Event.CONNECTION_REMOTE_CLOSE.number: _on_connection_remote_close,
        Event.SESSION_REMOTE_OPEN.number: _on_session_remote_open,
        Event.SESSION_REMOTE_CLOSE.number: _on_session_remote_close,
        Event.LINK_REMOTE_OPEN.number: _on_link_remote_open,
        Event.LINK_REMOTE_CLOSE.number: _on_link_remote_close,
        Event.LINK_REMOTE_DETACH.number: _on_link_remote_detach,
        Event.TRANSPORT_ERROR.number: _on_transport_error,
        Event.TRANSPORT_CLOSED.number: _on_transport_closed,
    }

    def _flush_output(self) -> None:
        self._write_output()

    # -- the anonymous relay ----------------------------------------------------------------
    def relay_target(self, to: str) -> tuple[str, str | None]:
        """A message's ``to`` -> (address, routing), send-checked once per name."""
        hit = self._relay.get(to)
        if hit is None:
            hit = parse_address(to)
            assert self.session is not None
            self.session.check_send(*hit)
            if len(self._relay) < 1000:
                self._relay[to] = hit
        return hit

    # -- StreamSession: flow control, closing -------------------------------------------
    def pause_writing(self) -> None:
        self.paused_writing = True
        if self.session is not None:
            self.session.pause()

    def resume_writing(self) -> None:
        self.paused_writing = False
        if self.session is not None:
            self.session.resume()
        for state in list(self.links.values()):
            if isinstance(state, Browser):
                state.flow()

    def fail(self, message: str, detail: str = "") -> None:
        """Close the connection with an error condition saying what was wrong."""
        if self.closed:
            return
        log.info("AMQP %s: %s%s", self.peer, message, f" ({detail})" if detail else "")
        if self.sasl.phase is not Phase.DONE or self.principal is None:
            self.close()
            return
        desc = f"{message}: {detail}" if detail else message
        self.conn.condition = Condition(errors.FORCED, desc[:1000])
        if not self.conn.state & Endpoint.LOCAL_ACTIVE and self.conn.state & Endpoint.LOCAL_UNINIT:
            self.conn.open()
        self.conn.close()
        self._flush_output()
        self.close()

    def close(self) -> None:
        """Close from the node's side (shutdown, a refused login, a failure)."""
        if self.closed:
            return
        if self.connected and not self.conn.state & Endpoint.LOCAL_CLOSED:
            self.conn.condition = Condition(errors.FORCED, "the node closed the connection")
            self.conn.close()
            self._flush_output()
        self._finish()

    def _finish(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._cleanup()
        self.link.close()

    def connection_lost(self) -> None:
        if not self.closed:
            self.closed = True
            self._cleanup()

    def _cleanup(self) -> None:
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None
        self._held = None  # input held for a login still being checked
        if self.session is not None:
            self._settle_accepted()  # accepted before the connection went: not redelivered
            self.session.close()
        # the link states refer to this session: without the map, a closed connection (and
        # proton's buffers) is not kept in a cycle until the cyclic GC runs
        self.links.clear()


__all__ = ["AMQP_HEADER", "NODE_PROPERTY", "AmqpOptions", "AmqpSession", "options_from"]
