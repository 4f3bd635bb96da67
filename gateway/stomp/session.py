"""One STOMP connection's session: frames in, engine calls, frames out.

The session is transport-agnostic: it is fed bytes and writes bytes to a ``Link``, so TCP,
WebSocket and the HTTP tunnel share it.  Any protocol violation is answered with an ERROR
frame whose ``message`` header says what was wrong, and the connection is closed (STOMP
requires it); the engine and every other connection are unaffected.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any

from waystation.core.authentication import authenticator
from waystation.core.consumer import ConsumerError, Delivery
from waystation.core.engine import Engine
from waystation.core.filter import FilterError
from waystation.core.limits import LimitExceeded
from waystation.core.message import DESTINATION, now_ms
from waystation.core.postoffice import AddressFull, RoutingError
from waystation.core.queue import MULTICAST
from waystation.core.security import AuthenticationError, NotAuthorized, Principal
from waystation.core.session import CreditMode, Outcome, Session, SessionError, Source
from waystation.core.transaction import TransactionError
from waystation.gateway.admission import certificate_subject
from waystation.gateway.link import Link
from waystation.gateway.stomp.destinations import format_destination, parse_destination
from waystation.gateway.stomp.mapping import (
    NODE_HEADER,
    REVERSE_HEADER,
    delivery_headers,
    message_from_send,
)
from waystation.gateway.stomp.served_link import ServedLink
from waystation.wire.stomp import (
    Frame,
    Limits,
    StompError,
    StompParser,
    encode_frame,
    encode_message,
    encode_receipt,
)

log = logging.getLogger("waystation.stomp")

SERVER_NAME = "Waystation/0.1"
NOT_TEXT = "body-not-text"  # dead-letter reason: a binary body on a text-only transport
VERSIONS = ("1.2", "1.1", "1.0")
ACK_MODES = ("auto", "client", "client-individual")
DURABLE_NAME_HEADERS = (
    "durable-subscription-name",
    "activemq.subscriptionName",
    "durable-subscriber-name",
)
WINDOW_HEADERS = ("prefetch-count", "activemq.prefetchSize", "consumer-window-size")


@dataclass(slots=True)
class StompOptions:
    limits: Limits
    heartbeat_send_ms: int = 10000  # what the server offers to send
    heartbeat_receive_ms: int = 10000  # what the server wants to receive
    heartbeat_min_ms: int = 500  # faster heart-beats asked by a client are raised to this
    heartbeat_grace: float = 2.0  # a peer silent for grace x interval is dead
    connection_ttl: float = (
        60.0  # seconds of silence before a connection without heart-beats is closed
    )
    default_window: int | None = None  # None: the address setting
    # the transport carries text only (SockJS): a message whose body is not UTF-8 goes to
    # the dead-letter address (reason NOT_TEXT) instead of to the client
    text_only: bool = False


class _Sub:
    __slots__ = (
        "id",
        "destination",
        "routing",
        "ack",
        "consumer",
        "durable_name",
        "last_address",
        "last_sent_as",
        "last_dest",
    )

    def __init__(
        self,
        sid: str,
        destination: str,
        routing: str | None,
        ack: str,
        durable_name: str | None,
    ) -> None:
        self.id = sid
        self.destination = destination
        self.routing = routing
        self.ack = ack
        self.consumer: Any = None  # a Consumer once subscribed
        self.durable_name = durable_name
        self.last_address = ""  # the destination header of the last delivery, reused
        self.last_sent_as: object = None
        self.last_dest = destination


async def _all(futures: list[asyncio.Future[None]]) -> None:
    for f in futures:
        await f


class StompSession:
    def __init__(self, engine: Engine, link: Link, options: StompOptions) -> None:
        self.engine = engine
        self.link = link
        self.options = options
        self.parser = StompParser(options.limits)
        self.version = "1.0"
        self.connected = False
        self.closed = False
        self.principal: Principal | None = None
        self.client_id: str | None = None
        self.session: Session | None = None  # the core session, from CONNECT on
        self.subs: dict[str, _Sub] = {}
        self._browsed: set[str] = set()  # ids of browser:true subscriptions (already done)
        self.pending_acks: dict[str, tuple[_Sub, int]] = {}
        self._destinations: dict[str, tuple[str, str | None]] = {}  # parsed and send-checked
        self._ack_seq = 0
        self._tail: asyncio.Future[None] | None = None  # last durable write not yet confirmed
        self._last_read = time.monotonic()
        self._last_write = time.monotonic()
        self._read = False
        self._wrote = False
        self._last_tick = time.monotonic()
        self._hb_handle: asyncio.TimerHandle | None = None
        self._send_every = 0.0
        self._expect_every = 0.0
        self._ttl_only = False
        self._paused_writing = False
        self._blocked_reading = False
        self._authenticating: bytearray | None = None  # input held during a login check
        self.served: ServedLink | None = None  # a dialled-in node's traffic back (ws-link)
        self.loop = asyncio.get_running_loop()

    # -- input ----------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self._read = True
        held = self._authenticating  # a local: mypy (so mypyc) would keep the None past _handle
        if held is not None:  # held until the login check answers
            held += data
            return
        engine = self.engine
        engine.begin_burst()  # the store writes of this read are one journal batch
        try:
            events = self.parser.feed(data)
            while events:
                for ev in events:
                    if isinstance(ev, Frame):
                        self._handle(ev)
                        if self.closed or self._authenticating is not None:
                            return
                # the parser stops after CONNECT so the version is set before the rest
                last = events[-1]
                events = (
                    self.parser.feed(b"")
                    if isinstance(last, Frame) and last.command in ("CONNECT", "STOMP")
                    else []
                )
        except StompError as e:
            self.fail(e.message, e.detail, e.receipt_id)
        except Exception:  # a bug must not take the server down: report and close
            log.exception("STOMP session %s: internal error", self.link.peer)
            self.fail("internal error", "the server failed to process the frame; see its log")
        finally:
            engine.end_burst()

    def _handle(self, frame: Frame) -> None:
        cmd = frame.command
        if not self.connected:
            if cmd in ("CONNECT", "STOMP"):
                self._on_connect(frame)
                return
            raise StompError(
                f"expected CONNECT or STOMP frame, got {cmd}",
                receipt_id=frame.headers.get("receipt"),
            )
        handler = _HANDLERS.get(cmd)
        if handler is None:
            if cmd in ("CONNECT", "STOMP"):
                raise StompError("already connected")
            raise StompError(f"unknown command {cmd!r}", receipt_id=frame.headers.get("receipt"))
        try:
            handler(self, frame)
        except StompError as e:
            if e.receipt_id is None:
                e.receipt_id = frame.headers.get("receipt")
            raise
        except (
            RoutingError,
            AddressFull,
            NotAuthorized,
            TransactionError,
            ConsumerError,
            SessionError,
            LimitExceeded,
            ValueError,
        ) as err:  # not `e`: mypyc types one name per function
            what = {
                RoutingError: "unknown destination",
                AddressFull: "address full",
                NotAuthorized: "not authorized",
                TransactionError: "transaction error",
                ConsumerError: "subscription refused",
                SessionError: "subscription refused",
                LimitExceeded: "limit exceeded",
            }.get(type(err), "invalid request")
            if isinstance(err, FilterError):
                what = "invalid selector"
            raise StompError(f"{what}: {err}", receipt_id=frame.headers.get("receipt")) from err

    # -- output ---------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        self._wrote = True  # the heart-beat timer reads and clears it: no clock call per frame
        self.link.write(data)

    def write(self, data: bytes) -> None:
        self._write(data)

    def _frame(self, command: str, headers: dict[str, str], body: bytes = b"") -> None:
        self._write(encode_frame(command, headers, body, self.version))

    def _receipt(self, frame: Frame, after: asyncio.Future[None] | None = None) -> None:
        """Send RECEIPT when asked, after ``after`` (and every earlier durable write) is done."""
        rid = frame.headers.get("receipt")
        if after is not None:
            self._tail = after
        if rid is None:
            return
        tail = self._tail
        if tail is None or (tail.done() and not tail.cancelled() and tail.exception() is None):
            self._tail = None
            self._write(encode_receipt(rid, self.version))
            return

        def done(f: asyncio.Future[None]) -> None:
            if self.closed:
                return
            if f.cancelled() or f.exception() is not None:
                exc = None if f.cancelled() else f.exception()
                if exc is not None:
                    log.warning("STOMP %s: store write failed: %s", self.link.peer, exc)
                if getattr(exc, "outcome_unknown", False):
                    self.fail(
                        "store failure: outcome unknown",
                        "the node could not tell whether the message reached its store",
                        rid,
                    )
                    return
                self.fail(
                    "store failure: message not persisted",
                    "the node could not write the message to its store",
                    rid,
                )
            else:
                if self._tail is f:
                    self._tail = None
                self._write(encode_receipt(rid, self.version))

        if tail.done():  # failed or cancelled
            done(tail)
        else:
            tail.add_done_callback(done)

    def fail(self, message: str, detail: str = "", receipt_id: str | None = None) -> None:
        """ERROR frame then close (the spec requires the close)."""
        if self.closed:
            return
        log.info("STOMP %s: %s%s", self.link.peer, message, f" ({detail})" if detail else "")
        headers = {"message": message.replace("\n", " ")[:1000], "content-type": "text/plain"}
        if receipt_id is not None:
            headers["receipt-id"] = receipt_id
        version = self.version if self.connected else "1.0"
        body = (detail or message).encode()
        self._write(encode_frame("ERROR", headers, body, version))
        self.close()

    def close(self) -> None:
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
        if self.served is not None:
            self.served.ended("connection closed")
        if self._hb_handle is not None:
            self._hb_handle.cancel()
            self._hb_handle = None
        self.subs.clear()
        self.pending_acks.clear()
        if self.session is not None:
            self.session.close()

    # -- flow control from the link -------------------------------------------------------
    def pause_writing(self) -> None:
        self._paused_writing = True
        if self.session is not None:
            self.session.pause()
        if self.served is not None:
            self.served.pause_writing()

    def resume_writing(self) -> None:
        self._paused_writing = False
        if self.session is not None:
            self.session.resume()
        if self.served is not None:
            self.served.resume_writing()

    # -- CONNECT ---------------------------------------------------------------------------
    def _on_connect(self, frame: Frame) -> None:
        h = frame.headers
        accepted = h.get("accept-version")
        if accepted is None:
            version = "1.0"
        else:
            offered = {v.strip() for v in accepted.split(",")}
            version = next((v for v in VERSIONS if v in offered), "")
            if not version:
                self._write(
                    encode_frame(
                        "ERROR",
                        {
                            "version": ",".join(reversed(VERSIONS)),
                            "content-type": "text/plain",
                            "message": "Supported protocol versions are 1.0,1.1,1.2",
                        },
                        f"client offered {accepted!r}".encode(),
                        "1.0",
                    )
                )
                self.close()
                return
        # every header is checked before the login and the core session: a malformed one
        # is refused with its own ERROR (StompError), and nothing is opened for it
        beat = _parse_heartbeat(h.get("heart-beat", "0,0")) if version != "1.0" else (0, 0)
        auth = authenticator(self.engine)
        login, passcode, peer = h.get("login"), h.get("passcode"), str(self.link.peer)
        subject = certificate_subject(getattr(self.link, "peer_certificate", None))
        if subject is not None and login is None and self.engine.security.enabled:
            try:  # a verified TLS client certificate is the login (users' ``certificate``)
                principal = auth.certificate(subject, peer)
            except AuthenticationError as e:
                self.fail("authentication failed", str(e))
                return
            self._connected(frame, version, beat, principal)
            return
        if not self.engine.security.enabled:
            principal = auth.authenticate_blocking(login, passcode, peer)
            self._connected(frame, version, beat, principal)
            return
        # the password hash runs off the loop; frames after CONNECT wait for its answer
        self._authenticating = bytearray()
        self.link.pause_reading()
        task = self.loop.create_task(auth.authenticate(login, passcode, peer))
        task.add_done_callback(lambda t: self._authenticated(t, frame, version, beat))

    def _authenticated(
        self, task: asyncio.Task[Principal], frame: Frame, version: str, beat: tuple[int, int]
    ) -> None:
        held, self._authenticating = self._authenticating, None
        # retrieved even when the connection is gone: asyncio logs an exception never
        # retrieved, with its traceback, and any client can cause one per wrong password
        e = None if task.cancelled() else task.exception()
        if self.closed:
            return
        if task.cancelled() or e is not None:
            if not isinstance(e, AuthenticationError):
                log.error("STOMP %s: login check failed: %r", self.link.peer, e)
            self.fail("authentication failed", str(e) if isinstance(e, AuthenticationError) else "")
            return
        try:
            self._connected(frame, version, beat, task.result())
        except StompError as err:  # outside data_received's handler: answered here
            self.fail(err.message, err.detail, err.receipt_id)
            return
        except Exception:
            log.exception("STOMP session %s: internal error", self.link.peer)
            self.fail("internal error", "the server failed to process the frame; see its log")
            return
        self.link.resume_reading()
        if not self.closed:
            self.data_received(b"" if held is None else bytes(held))

    def _connected(
        self, frame: Frame, version: str, beat: tuple[int, int], principal: Principal
    ) -> None:
        """Open the core session and answer CONNECTED; ``beat`` is the client's heart-beat
        header, already checked (``_on_connect``)."""
        h = frame.headers
        self.principal = principal
        self.client_id = h.get("client-id")
        try:
            self.session = self.engine.open_session(
                self.principal, "stomp", str(self.link.peer), self.client_id
            )
        except LimitExceeded as e:
            self.fail("limit exceeded", str(e))
            return
        claimed = h.get(NODE_HEADER)
        if claimed:
            try:
                self.session.claim_node(claimed)
            except NotAuthorized as err:  # not `e`: mypyc types one name per function
                self.fail("not authorized", str(err))
                return
        self.version = version
        self.parser.version = version
        headers = {
            "version": version,
            "server": SERVER_NAME,
            "session": secrets.token_hex(16),  # random: an id() told memory addresses
            NODE_HEADER: self.engine.node_name,
        }
        if version != "1.0":
            cx, cy = beat
            floor = self.options.heartbeat_min_ms
            cx, cy = (max(cx, floor) if cx else 0), (max(cy, floor) if cy else 0)
            sx, sy = self.options.heartbeat_send_ms, self.options.heartbeat_receive_ms
            send_every = max(sx, cy) if sx and cy else 0
            expect_every = max(cx, sy) if cx and sy else 0
            headers["heart-beat"] = f"{sx},{sy}"
            self._send_every = send_every / 1000.0
            self._expect_every = expect_every / 1000.0
        if not self._expect_every and self.options.connection_ttl > 0:
            self._expect_every = self.options.connection_ttl  # no heart-beats: the TTL applies
            self._ttl_only = True
        if self._send_every or self._expect_every:
            self._arm_heartbeat()
        self.connected = True
        self._frame("CONNECTED", headers)

    def _arm_heartbeat(self) -> None:
        intervals = [x for x in (self._send_every, self._expect_every) if x]
        self._hb_handle = self.loop.call_later(min(intervals) / 2, self._heartbeat)

    def _heartbeat(self) -> None:
        if self.closed:
            return
        now = time.monotonic()
        if self._read:
            self._read = False
            self._last_read = now
        if self._wrote:  # written since the last tick: date it to that tick (errs early)
            self._wrote = False
            self._last_write = self._last_tick
        self._last_tick = now
        limit = self._expect_every * (1.0 if self._ttl_only else self.options.heartbeat_grace)
        if self._expect_every and now - self._last_read > limit:
            what = "connection TTL expired" if self._ttl_only else "no heart-beat"
            log.info(
                "STOMP %s: %s after %.1fs of silence; closing",
                self.link.peer,
                what,
                now - self._last_read,
            )
            self.close()
            return
        if self._send_every and now - self._last_write >= self._send_every * 0.9:
            self._write(b"\n")
        self._arm_heartbeat()

    # -- SEND ------------------------------------------------------------------------------
    def _on_send(self, frame: Frame) -> None:
        h = frame.headers
        dest = h.get("destination")
        if not dest:
            raise StompError("SEND frame has no destination header")
        session = self.session
        assert session is not None
        hit = self._destinations.get(dest)
        if hit is None:
            hit = parse_destination(dest)
            session.check_send(*hit)
            if len(self._destinations) < 1000:
                self._destinations[dest] = hit
        address, routing = hit
        user = self.principal.name if self.engine.security.enabled and self.principal else None
        msg = message_from_send(self.engine.ids(), address, h, frame.body, now_ms(), user=user)
        txid = h.get("transaction")
        if txid is not None:
            self._tx(txid)
            session.send(msg, routing=routing, tx=txid)
            self._receipt(frame)
            return
        fut = session.send(msg, routing=routing)
        gate = session.blocked(address)
        if gate is not None and self.served is not None:
            # a link that carries traffic back: keep reading (its ACKs come this way) and hold
            # the RECEIPT instead; the dialling bridge's window stops its SENDs
            waits = [f for f in (fut, gate) if f is not None]
            fut = asyncio.ensure_future(_all(waits))
            gate = None
        self._receipt(frame, fut)
        if gate is not None and not self._blocked_reading:
            self._blocked_reading = True
            self.link.pause_reading()
            gate.add_done_callback(self._unblock)

    def _unblock(self, _: asyncio.Future[None]) -> None:
        self._blocked_reading = False
        if not self.closed:
            self.link.resume_reading()

    # -- SUBSCRIBE / UNSUBSCRIBE ------------------------------------------------------------
    def _on_subscribe(self, frame: Frame) -> None:
        h = frame.headers
        dest = h.get("destination")
        if not dest:
            raise StompError("SUBSCRIBE frame has no destination header")
        sid = h.get("id")
        if sid is None:
            if self.version != "1.0":
                raise StompError("SUBSCRIBE frame has no id header")
            sid = dest
        if sid in self.subs:
            raise StompError(f"subscription id {sid!r} is already in use on this connection")
        ack = h.get("ack", "auto")
        if ack not in ACK_MODES:
            raise StompError(
                f"invalid ack mode {ack!r}: expected auto, client or client-individual"
            )
        if h.get(REVERSE_HEADER):
            self._serve_link(frame, sid)
            return
        address, routing = parse_destination(dest)
        if h.get("browser") == "true":  # ActiveMQ's queue browser: a look, nothing taken
            self._browse(frame, sid, dest, address, routing)
            return
        durable_name = next((h[k] for k in DURABLE_NAME_HEADERS if h.get(k)), None)
        window: int | None = self.options.default_window
        for k in WINDOW_HEADERS:
            if k in h:
                window = _int_header(h, k, -1, None)
                if window < 0:
                    window = 0
                break
        session = self.session
        assert session is not None
        routing = routing or self.engine.resolve_routing(address)
        s = _Sub(sid, dest, routing, ack, durable_name)
        s.consumer = session.subscribe(
            Source(
                address,
                routing,
                selector=h.get("selector"),
                durable_name=durable_name if routing == MULTICAST else None,
            ),
            _Handler(self, s),
            mode=CreditMode.PRESETTLED if ack == "auto" else CreditMode.WINDOW,
            window=window,
            name=sid,
        )
        if self._paused_writing:
            s.consumer.pause()
        self.subs[sid] = s
        self._receipt(frame)

    def _serve_link(self, frame: Frame, sid: str) -> None:
        """A node that dialled in asks for what waits here for it (bridges/accepted.py)."""
        if self.served is not None:
            raise StompError("this connection already carries traffic back")
        if self.version != "1.2":
            raise StompError("a link carrying traffic back needs STOMP 1.2")
        assert self.session is not None
        served = ServedLink(self, sid)
        self.session.serve_link(served)
        self.served = served
        self._receipt(frame)

    def _browse(self, frame: Frame, sid: str, dest: str, address: str, routing: str | None) -> None:
        """Send the messages waiting in queue ``address`` now, each marked ``browser:true``,
        then ActiveMQ's end-of-browse MESSAGE (``browser:end``, ``message-id:0``, no body).
        Nothing is consumed or acknowledged; the subscription ends there (an UNSUBSCRIBE of
        it is accepted)."""
        if (routing or self.engine.resolve_routing(address)) == MULTICAST:
            raise StompError(f"browser:true applies to queues only, not {dest!r}")
        assert self.session is not None
        found = self.session.browse(address, frame.headers.get("selector"))
        self._browsed.add(sid)
        self._receipt(frame)
        v, write = self.version, self._write
        for msg in found:
            if self.options.text_only and not _is_text(msg.body):
                continue  # a text-only transport (SockJS) cannot carry it; browsing skips it
            extra = delivery_headers(msg)
            extra["browser"] = "true"
            write(encode_message(dest, str(msg.id), sid, msg.body, extra, None, v))
        write(encode_message(dest, "0", sid, b"", {"browser": "end"}, None, v))

    def _on_unsubscribe(self, frame: Frame) -> None:
        h = frame.headers
        sid = h.get("id") or (h.get("destination") if self.version == "1.0" else None)
        if sid is None:
            raise StompError("UNSUBSCRIBE frame has no id header")
        s = self.subs.pop(sid, None)
        if s is None and sid in self._browsed:  # a browse, already over
            self._browsed.discard(sid)
            self._receipt(frame)
            return
        if s is None:
            raise StompError(f"no subscription with id {sid!r}")
        delete_durable = any(h.get(k) for k in DURABLE_NAME_HEADERS)
        for key, (owner, _tag) in list(self.pending_acks.items()):
            if owner is s:
                del self.pending_acks[key]
        assert self.session is not None
        self.session.unsubscribe(s.consumer, delete_durable=delete_durable)
        self._receipt(frame)

    # -- deliveries -------------------------------------------------------------------------
    def deliver(self, s: _Sub, d: Delivery) -> None:
        msg = d.message
        if self.options.text_only and not _is_text(msg.body):
            self._dead_letter_not_text(s, d)
            return
        extra = delivery_headers(msg)
        if d.ref.delivery_count > 1:
            extra["redelivered"] = "true"
        mid = str(msg.id)
        ack_id: str | None = None
        if s.ack != "auto":
            if self.version == "1.2":
                self._ack_seq += 1
                ack_id = f"{self._ack_seq}"
                self.pending_acks[ack_id] = (s, d.tag)
            else:
                self.pending_acks[mid] = (s, d.tag)
        address = msg.address
        sent_as = msg.annotation(DESTINATION)
        if address == s.last_address and sent_as == s.last_sent_as:
            dest = s.last_dest
        else:
            if sent_as is not None and parse_destination(str(sent_as))[0] == address:
                dest = str(sent_as)  # the form the SEND named (STOMP 1.2)
            else:
                dest = format_destination(address, s.routing) if s.routing else s.destination
            s.last_address, s.last_sent_as, s.last_dest = address, sent_as, dest
        self._write(encode_message(dest, mid, s.id, msg.body, extra, ack_id, self.version))

    def _dead_letter_not_text(self, s: _Sub, d: Delivery) -> None:
        detail = f"subscription {s.id!r} of session {self.link.peer} takes text only"
        assert self.session is not None
        if s.ack == "auto":
            self.session.dead_letter_copy(d.message, NOT_TEXT, detail)
        else:
            self.session.settle(d.consumer, d.tag, Outcome.REJECTED, reason=NOT_TEXT, detail=detail)

    # -- ACK / NACK ------------------------------------------------------------------------
    def _ack_target(self, frame: Frame) -> tuple[_Sub, int, str]:
        h = frame.headers
        key = h.get("id") if self.version == "1.2" else h.get("message-id")
        if key is None:
            raise StompError(
                f"{frame.command} frame has no {'id' if self.version == '1.2' else 'message-id'} header"
            )
        hit = self.pending_acks.get(key)
        if hit is None:
            raise StompError(
                f"{frame.command} for unknown message id {key!r}: not delivered on this connection or already acknowledged"
            )
        return hit[0], hit[1], key

    def _served_ack(self, frame: Frame) -> bool:
        """An ACK or NACK of the served link's MESSAGEs: True when it was one."""
        served = self.served
        key = frame.headers.get("id")
        if served is None or key is None or not served.owns(key):
            return False
        if frame.command == "ACK":
            served.acked(key)
        else:
            served.nacked(key, frame.headers)
        self._receipt(frame)
        return True

    def _on_ack(self, frame: Frame) -> None:
        if self.served is not None and self._served_ack(frame):
            return
        s, tag, key = self._ack_target(frame)
        txid = frame.headers.get("transaction")
        if txid is not None:
            self._tx(txid)
        session = self.session
        assert session is not None
        cumulative = s.ack == "client"
        if cumulative:
            for k, (owner, t) in list(self.pending_acks.items()):
                if owner is s and t <= tag:
                    del self.pending_acks[k]
        else:
            del self.pending_acks[key]
        session.settle(s.consumer, tag, Outcome.ACCEPTED, cumulative=cumulative, tx=txid)
        if "receipt" in frame.headers and txid is None and s.consumer.queue.durable:
            self._receipt(frame, asyncio.ensure_future(session.flush()))
        else:
            self._receipt(frame)

    def _on_nack(self, frame: Frame) -> None:
        if self.version == "1.0":
            raise StompError("NACK is not part of STOMP 1.0")
        if self.served is not None and self._served_ack(frame):
            return
        s, tag, key = self._ack_target(frame)
        txid = frame.headers.get("transaction")
        if txid is not None:
            self._tx(txid)
        del self.pending_acks[key]
        assert self.session is not None
        self.session.settle(s.consumer, tag, Outcome.MODIFIED, tx=txid)
        self._receipt(frame)

    # -- transactions ------------------------------------------------------------------------
    def _tx(self, txid: str) -> None:
        if self.session is None or txid not in self.session.transactions:
            raise StompError(f"unknown transaction {txid!r}")

    def _txid(self, frame: Frame) -> str:
        txid = frame.headers.get("transaction")
        if not txid:
            raise StompError(f"{frame.command} frame has no transaction header")
        return txid

    def _on_begin(self, frame: Frame) -> None:
        txid = self._txid(frame)
        assert self.session is not None
        if txid in self.session.transactions:
            raise StompError(f"transaction {txid!r} is already active")
        self.session.begin(txid)
        self._receipt(frame)

    def _on_commit(self, frame: Frame) -> None:
        txid = self._txid(frame)
        self._tx(txid)
        assert self.session is not None
        self._receipt(frame, self.session.commit(txid))

    def _on_abort(self, frame: Frame) -> None:
        txid = self._txid(frame)
        self._tx(txid)
        assert self.session is not None
        self.session.rollback(txid)
        self._receipt(frame)

    # -- DISCONNECT ------------------------------------------------------------------------
    def _on_disconnect(self, frame: Frame) -> None:
        rid = frame.headers.get("receipt")
        tail = self._tail
        if rid is None:
            self.close()
            return

        def finish(_: object = None) -> None:
            if not self.closed:
                self._frame("RECEIPT", {"receipt-id": rid})
                self.close()

        if tail is not None and not tail.done():
            tail.add_done_callback(finish)
        else:
            finish()


# Outside the class body, so that mypyc can compile the class.
_HANDLERS = {
    "SEND": StompSession._on_send,
    "SUBSCRIBE": StompSession._on_subscribe,
    "UNSUBSCRIBE": StompSession._on_unsubscribe,
    "ACK": StompSession._on_ack,
    "NACK": StompSession._on_nack,
    "BEGIN": StompSession._on_begin,
    "COMMIT": StompSession._on_commit,
    "ABORT": StompSession._on_abort,
    "DISCONNECT": StompSession._on_disconnect,
}


class _Handler:
    """Adapts engine deliveries to one subscription of a session."""

    __slots__ = ("session", "sub")

    def __init__(self, session: StompSession, sub: _Sub) -> None:
        self.session = session
        self.sub = sub

    def deliver(self, delivery: Delivery) -> None:
        self.session.deliver(self.sub, delivery)

    def consumer_closed(self, consumer: object, reason: str) -> None:
        if not self.session.closed:
            self.session.fail(f"subscription {self.sub.id!r} closed: {reason}")


def _is_text(body: bytes) -> bool:
    try:
        body.decode()
    except UnicodeDecodeError:
        return False
    return True


MAX_HEARTBEAT_MS = 86_400_000  # one day: a larger heart-beat interval is lowered to it


def _parse_heartbeat(value: str) -> tuple[int, int]:
    """The two intervals of a ``heart-beat`` header (StompError, naming the header, if it
    is not two integers >= 0)."""
    try:
        a, b = value.split(",")
        cx, cy = int(a), int(b)
    except ValueError:
        raise StompError(
            "invalid heart-beat header",
            f"heart-beat {value[:100]!r}: expected two integers like 10000,10000",
        ) from None
    if cx < 0 or cy < 0:
        raise StompError(
            "invalid heart-beat header", f"heart-beat {value[:100]!r}: negative interval"
        )
    # a longer interval means as good as none: kept within what a timer can hold
    return min(cx, MAX_HEARTBEAT_MS), min(cy, MAX_HEARTBEAT_MS)


def _int_value(what: str, value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise StompError(f"invalid {what} {value!r}: expected an integer") from None


def _int_header(h: dict[str, str], name: str, lo: int, hi: int | None) -> int:
    v = _int_value(f"{name} header", h[name])
    if v < lo or (hi is not None and v > hi):
        raise StompError(
            f"invalid {name} header {v}: expected {lo}..{hi if hi is not None else 'any'}"
        )
    return v
