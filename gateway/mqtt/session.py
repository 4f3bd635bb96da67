"""One MQTT connection (3.1.1 or 5): packets in, core Session calls, packets out.

Transport-agnostic like the STOMP session: fed bytes, writing to a ``Link``, so TCP, TLS,
WebSocket and the HTTP tunnel share it.  A malformed or forbidden packet ends this
connection only (v5: a DISCONNECT, or a CONNACK before the session is up, names the reason);
the engine and every other connection go on.  Subscriptions live in ``subscriptions.py``;
the connection, PUBLISH both ways and the acknowledgements live here.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from waystation.core.authentication import authenticator
from waystation.core.engine import Engine
from waystation.core.limits import LimitExceeded
from waystation.core.message import now_ms
from waystation.core.queue import MULTICAST
from waystation.core.security import AuthenticationError, NotAuthorized, Principal
from waystation.core.session import Session
from waystation.gateway.admission import certificate_subject
from waystation.gateway.link import Link
from waystation.gateway.mqtt import subscriptions
from waystation.gateway.mqtt.deliveries import Deliveries
from waystation.gateway.mqtt.errors import REFUSALS, Refused, refusal_reason
from waystation.gateway.mqtt.inflight import NO_ENTRIES, Inbound, Outbound
from waystation.gateway.mqtt.keepalive import keepalive
from waystation.gateway.mqtt.options import MqttOptions
from waystation.gateway.mqtt.publish_in import PublishIn
from waystation.gateway.mqtt.registry import Registry, registry
from waystation.gateway.mqtt.subscriptions import Sub
from waystation.gateway.mqtt.topics import topic_to_address
from waystation.wire.mqtt import (
    MQTT_5,
    MQTT_311,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    MalformedPacket,
    MqttParser,
    PingReq,
    ProtocolError,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    Subscribe,
    Unsubscribe,
    encode,
)

log = logging.getLogger("waystation.mqtt")
_monotonic = time.monotonic

R = ReasonCode
FOREVER = 0xFFFFFFFF
_PINGRESP = b"\xd0\x00"
# CONNECT errors a 3.1.1 CONNACK has a return code for (others just close)
_CONNACK_311 = (R.UNSUPPORTED_PROTOCOL_VERSION, R.CLIENT_IDENTIFIER_NOT_VALID)
# what a closed session holds instead of its parser (and the partial packet in it): never fed
_SPENT = MqttParser()


def core_client_id(client_id: str) -> str:
    """The client id as the core names things by it (durable queues ``<id>.<name>``): the
    characters a name may not hold are written ``%XX``."""
    if all(c.isalnum() or c in "-_:.$@" for c in client_id):
        return client_id
    return "".join(
        c if c.isalnum() or c in "-_:.$@" else "".join(f"%{b:02X}" for b in c.encode())
        for c in client_id
    )


class MqttSession(PublishIn, Deliveries):
    __slots__ = (
        "_now",
        "engine",
        "link",
        "options",
        "parser",
        "version",
        "v5",
        "connected",
        "closed",
        "principal",
        "client_id",
        "session",
        "user",
        "expiry",
        "will",
        "will_delay",
        "subs",
        "outbound",
        "_inbound",
        "max_out_packet",
        "out_aliases",
        "_alias_of",
        "_held",
        "_hold_out",
        "_keepalive",
        "_last_read",
        "_ka_key",
        "_paused_writing",
        "_disconnected",
        "core_id",
        "_assigned",
        "_resume",
        "_stateful",
        "receive_max",
        "max_unreleased",
        "loop",
    )

    def __init__(self, engine: Engine, link: Link, options: MqttOptions) -> None:
        self.engine = engine
        self.link = link
        self.options = options
        self.parser = MqttParser(options.max_packet_size, options.max_client_id)
        self.version = MQTT_311
        self.v5 = False
        self.connected = False
        self.closed = False
        self.principal: Principal | None = None
        self.client_id = ""
        self.session: Session | None = None
        self.user: str | None = None  # the message's user_id (security on)
        self.expiry = 0  # session expiry interval, seconds (0: ends with the connection)
        self.will: Any = None
        self.will_delay = 0
        self.subs: dict[str, Sub] = {}  # by topic filter
        self.outbound = Outbound(65535)
        self._inbound: Inbound | None = None  # made on first use (``PublishIn.inbound``)
        self.max_out_packet = 0  # the client's maximum packet size (0: no limit)
        self.out_aliases = 0  # topic aliases we may send the client (0: none)
        self._alias_of: dict[str, int] | None = None  # topic -> alias sent (v5, if allowed)
        # the dicts below start as the shared empty ``NO_ENTRIES`` and are made on first
        # write: an idle connection (most of them, at scale) holds none of its own
        self.in_aliases = NO_ENTRIES
        self._addresses = NO_ENTRIES
        self._pub_address = None
        self._refusals = 0
        self._held: list[Any] | None = None  # packets that came during the login check
        self._hold_out: list[bytes] | None = None  # writes held until a SUBACK goes out
        self._keepalive = 0.0
        self._now = 0  # ms, read once per batch of packets
        self._last_read = time.monotonic()
        self._ka_key = 0  # its bucket in the loop's keep-alive wheel (0: not watched)
        self._paused_writing = False
        self._disconnected = False  # a DISCONNECT came: no will unless it said 0x04
        self.core_id = ""  # the client id as the core names things by it
        self._assigned: str | None = None  # a client id the server chose
        self._resume: Sequence[Any] = ()  # saved subscriptions, attached after CONNACK
        self._stateful = False  # state was saved for this client id
        self.max_unreleased = engine.limits.max_unreleased_per_client
        self.receive_max = min(options.receive_maximum, self.max_unreleased)
        self.loop = asyncio.get_running_loop()

    @property
    def inbound(self) -> Inbound:
        """QoS 1/2 state of what the client publishes, made on first use: a connection that
        only subscribes never needs it."""
        ib = self._inbound
        if ib is None:
            ib = self._inbound = Inbound()
        return ib

    # -- input ----------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self._last_read = _monotonic()  # one clock reading per read, not per packet
        engine = self.engine
        engine.begin_burst()  # the store writes of this read are one journal batch
        try:
            try:
                packets = self.parser.feed(data)
            except (MalformedPacket, ProtocolError) as e:
                # the parser keeps it (and ``_held`` may): without its traceback, whose frames
                # hold this session, it makes no reference cycle
                self._run_then_fail(e.with_traceback(None))  # what came before still counts
                return
            if self._held is not None:
                self._held.extend(packets)
                return
            self._run(packets)
        except (MalformedPacket, ProtocolError) as e:
            e.with_traceback(None)  # it may be the parser's, held during the login
            self._protocol_error(e.reason_code, e.message)
        except Refused as e:  # a CONNECT refused: CONNACK says why
            self._refused(e)
        except Exception:  # a bug must not take the server down: report and close
            log.exception("MQTT session %s: internal error", self.link.peer)
            self._protocol_error(R.IMPLEMENTATION_SPECIFIC_ERROR, "internal error")
        finally:
            engine.end_burst()

    def _run_then_fail(self, e: MalformedPacket | ProtocolError) -> None:
        before: list[Any] = getattr(e, "packets", None) or []
        if self._held is not None:
            self._held.extend(before)
            self._held.append(e)
            return
        self._run(before)
        self._protocol_error(e.reason_code, e.message)

    def _run(self, packets: list[Any]) -> None:
        self._now = now_ms()  # one clock reading per batch: the PUBLISHes' timestamp
        for i, p in enumerate(packets):
            if self.closed:
                return
            t = type(p)
            if t is Publish:
                self._on_publish(p)
            elif t is PubAck and self.connected:
                self._on_puback(p)
            elif self.connected:
                handler = self._handlers.get(t)
                if handler is None:
                    if isinstance(p, (MalformedPacket, ProtocolError)):  # held during login
                        raise p
                    raise ProtocolError(R.PROTOCOL_ERROR, f"unexpected {t.__name__} packet")
                handler(self, p)
            elif t is Connect:
                self._on_connect(p)
                if self._held is not None:  # a login check started: the rest waits for it
                    self._held.extend(packets[i + 1 :])
                    return
            else:
                raise ProtocolError(
                    R.PROTOCOL_ERROR, f"[MQTT-3.1.0-1] expected CONNECT, got {t.__name__}"
                )
        if not self.closed:
            self._batch_done()

    def _batch_done(self) -> None:
        """What is done once per batch of packets rather than per packet: the consumer that
        PUBACKs freed is dispatched once, and the address published to is checked for room."""
        out = self.outbound
        c = out.acked
        if c is not None:
            out.acked = None
            c.queue.dispatch()
        if self._pub_address is not None:
            self.gate_batch()

    # -- output ---------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        held = self._hold_out
        if held is not None:
            held.append(data)
        else:
            self.link.write(data)

    def _packet(self, packet: Any) -> None:
        self._write(encode(packet, self.version))

    def _protocol_error(self, reason: int, text: str) -> None:
        """The connection ends for a packet that broke the rules (the will is published)."""
        log.info("MQTT %s: %s", self.link.peer, text)
        self._end(reason, text)

    def _end(self, reason: int, text: str, *, will: bool = True, connack: bool = False) -> None:
        """Close from our side: v5 is told why (CONNACK before the session is up, else
        DISCONNECT); 3.1.1 gets a CONNACK return code for a refused CONNECT only."""
        if self.closed:
            return
        self._hold_out = None
        if not self.connected:
            v5 = self.v5 or self.parser.version == MQTT_5  # a v5 CONNECT that failed to parse
            if v5 or connack or reason in _CONNACK_311:
                props = {"reason_string": text[:200]} if v5 else {}
                self.link.write(encode(ConnAck(reason, False, props), MQTT_5 if v5 else MQTT_311))
        elif self.v5:
            self.link.write(encode(Disconnect(reason, {"reason_string": text[:200]}), MQTT_5))
        self.closed = True
        self._cleanup(will)
        self.link.close()

    def _refused(self, e: Refused) -> None:
        log.info("MQTT %s: CONNECT of %r refused: %s", self.link.peer, self.client_id, e.text)
        self._end(e.reason, e.text, connack=True)

    def fail(self, message: str, detail: str = "") -> None:
        self._end(R.IMPLEMENTATION_SPECIFIC_ERROR, f"{message}: {detail}" if detail else message)

    def close(self) -> None:
        """The server goes (shutdown): v5 clients are told; no will is published."""
        self._end(R.SERVER_SHUTTING_DOWN, "the server is shutting down", will=False)

    def taken_over(self) -> None:
        """Another connection CONNECTed with this client id [MQTT-3.1.4-3]."""
        self._end(R.SESSION_TAKEN_OVER, "another connection took over this client id")

    def connection_lost(self) -> None:
        if not self.closed:
            self.closed = True
            self._cleanup(True)

    def _cleanup(self, will: bool) -> None:
        if self._ka_key:
            keepalive(self.loop).unwatch(self)
        self.outbound.backlog = None
        # what a pending login or store write (whose callbacks hold this session) would
        # otherwise keep: packets held for the login, a partial packet in the parser
        self._held = None
        self.parser = _SPENT
        session = self.session
        if session is None or not self.connected:
            if session is not None:
                session.close()
            return
        reg = registry(self.engine)
        if reg.live.get(self.client_id) is self:
            del reg.live[self.client_id]
        expire: Callable[[], None] | None = None
        try:
            if self.expiry == 0:
                subscriptions.drop_session(self)  # durable subscriptions of a resumed session
            else:
                expire = subscriptions.expirer(self)
        except Exception:
            log.exception("MQTT %s: ending the session of %r", self.link.peer, self.client_id)
        subs = list(self.subs.values())
        self.subs.clear()
        session.close()
        for s in subs:  # consumers closed: the Sub <-> Consumer <-> session cycles go
            s.release()
        assert self.principal is not None
        reg.left(
            self.client_id,
            self.principal,
            str(self.link.peer),
            self.will if will and not self._disconnected else None,
            self.will_delay,
            self.expiry,
            expire,
        )

    # -- flow control ---------------------------------------------------------------------
    def pause_writing(self) -> None:
        self._paused_writing = True
        if self.session is not None:
            self.session.pause()

    def resume_writing(self) -> None:
        self._paused_writing = False
        if self.session is not None and not self.outbound.window_paused:
            self.session.resume()

    # -- CONNECT ---------------------------------------------------------------------------
    def _on_connect(self, p: Connect) -> None:
        self.version = MQTT_5 if p.protocol_level == MQTT_5 else MQTT_311
        self.v5 = self.version == MQTT_5
        props = p.properties
        if self.v5 and props.get("authentication_method") is not None:
            raise Refused(R.BAD_AUTHENTICATION_METHOD, "enhanced authentication is not supported")
        cid = p.client_id
        if not cid:
            if not self.v5 and not p.clean_start:
                raise Refused(
                    R.CLIENT_IDENTIFIER_NOT_VALID,
                    "[MQTT-3.1.3-8] an empty client id needs a clean session",
                )
            cid = f"ws-{uuid.uuid4().hex}"
            self._assigned = cid
        else:
            self._assigned = None
        self.client_id = cid
        password: str | None = None
        if p.password is not None:
            try:
                password = p.password.decode()
            except UnicodeDecodeError:
                raise Refused(R.BAD_USER_NAME_OR_PASSWORD, "the password is not UTF-8") from None
        auth = authenticator(self.engine)
        peer = str(self.link.peer)
        subject = certificate_subject(getattr(self.link, "peer_certificate", None))
        if subject is not None and p.username is None and self.engine.secured:
            try:  # a verified TLS client certificate is the login (users' ``certificate``)
                principal = auth.certificate(subject, peer)
            except AuthenticationError as e:
                raise Refused(R.NOT_AUTHORIZED, str(e)) from None
            self._connected(p, principal)
            return
        if not self.engine.secured:
            self._connected(p, auth.authenticate_blocking(p.username, password, peer))
            return
        # the password hash runs off the loop; packets after CONNECT wait for its answer
        self._held = []
        self.link.pause_reading()
        task = self.loop.create_task(auth.authenticate(p.username, password, peer))
        task.add_done_callback(lambda t: self._authenticated(t, p))

    def _authenticated(self, task: asyncio.Task[Principal], p: Connect) -> None:
        held, self._held = self._held or [], None
        # retrieved even when the connection is gone: asyncio logs an exception never
        # retrieved, with its traceback, and any client can cause one per wrong password
        failure = None if task.cancelled() else task.exception()
        if self.closed:
            return
        if task.cancelled() or failure is not None:
            if not isinstance(failure, AuthenticationError):
                log.error("MQTT %s: login check failed: %r", self.link.peer, failure)
            why = str(failure) if failure else "authentication failed"
            self._end(R.BAD_USER_NAME_OR_PASSWORD, why, will=False, connack=True)
            return
        self.link.resume_reading()
        try:
            self._connected(p, task.result())
            self._run(held)
        except (MalformedPacket, ProtocolError) as e:
            e.with_traceback(None)  # it may be the parser's (see data_received)
            self._protocol_error(e.reason_code, e.message)
        except Refused as e:
            self._refused(e)
        except Exception:
            log.exception("MQTT session %s: internal error", self.link.peer)
            self._protocol_error(R.IMPLEMENTATION_SPECIFIC_ERROR, "internal error")

    def _connected(self, p: Connect, principal: Principal) -> None:
        o, engine, cid = self.options, self.engine, self.client_id
        self.principal = principal
        if engine.secured:
            self.user = principal.name
        ack: dict[str, Any] = {}
        self._start_keepalive(p.keepalive, ack)  # first: a refusal takes nothing over
        reg = registry(engine)
        old = reg.live.get(cid)
        self.core_id = core_client_id(cid)
        self._claim(reg, old, principal)  # before anything of the client id's is touched
        if old is not None and old is not self:
            old.taken_over()
        reg.returning(cid, p.clean_start)
        props = p.properties
        if self.v5:
            asked = int(props.get("session_expiry_interval", 0))
            self.expiry = min(asked, o.max_session_expiry) if asked != FOREVER else FOREVER
            if self.expiry == FOREVER and o.max_session_expiry < FOREVER:
                self.expiry = o.max_session_expiry
            if self.expiry != asked:
                ack["session_expiry_interval"] = self.expiry
        else:
            self.expiry = 0 if p.clean_start else o.session_expiry_311
        if p.will is not None:
            self._check_will(p)
        if not self.v5:
            self.outbound.limit = o.max_inflight
        try:
            present = subscriptions.open_state(self, p.clean_start)
        except LimitExceeded as e:  # the user's saved sessions or state bytes (security on)
            raise Refused(R.QUOTA_EXCEEDED if self.v5 else R.SERVER_UNAVAILABLE, str(e)) from e
        reg.live[cid] = self
        if self.v5:
            self._limits(props, ack)
            if self._assigned is not None:
                ack["assigned_client_identifier"] = self._assigned
        self.connected = True
        self._packet(ConnAck(0, present, ack))
        done = getattr(self.link, "logged_in", None)  # the listener's connect deadline ends
        if done is not None:
            done()
        if present:
            subscriptions.resume(self)

    def _claim(self, reg: Registry, old: MqttSession | None, principal: Principal) -> None:
        """Open the core session, and refuse (security on) a client id another user holds:
        connected, gone with a will or session pending, or with a saved session (the core
        knows its owner).  Nothing of theirs is taken over, resumed, shown or wiped."""
        try:
            self.session = self.engine.open_session(
                principal, "mqtt", str(self.link.peer), self.core_id
            )
        except LimitExceeded as e:
            raise Refused(R.QUOTA_EXCEEDED if self.v5 else R.SERVER_UNAVAILABLE, str(e)) from e
        if not self.engine.secured:
            return
        cid, name = self.client_id, principal.name
        theirs = old.principal if old is not None and old is not self else None
        gone = reg.gone.get(cid)
        if (theirs is not None and theirs.name != name) or (
            gone is not None and gone.principal.name != name
        ):
            raise Refused(R.NOT_AUTHORIZED, f"client id {cid!r} is another user's")
        try:
            self.session.load_state("subscriptions")
        except NotAuthorized as e:
            raise Refused(R.NOT_AUTHORIZED, f"client id {cid!r} is another user's") from e

    def _check_will(self, p: Connect) -> None:
        will = p.will
        assert will is not None and self.session is not None
        if will.qos > self.options.max_qos:
            raise Refused(R.QOS_NOT_SUPPORTED, f"will QoS {will.qos} is above the server's")
        try:
            self.session.check_send(topic_to_address(will.topic), MULTICAST)
        except REFUSALS as e:
            raise Refused(*refusal_reason(e)) from e
        self.will = will
        if self.v5:
            self.will_delay = int(will.properties.get("will_delay_interval", 0))

    def _limits(self, props: dict[str, Any], ack: dict[str, Any]) -> None:
        """What the v5 client allows us, and what we allow it (CONNACK properties)."""
        o = self.options
        self.outbound.limit = min(int(props.get("receive_maximum", 65535)), o.max_inflight)
        self.max_out_packet = int(props.get("maximum_packet_size", 0))
        if o.send_topic_aliases:
            self.out_aliases = int(props.get("topic_alias_maximum", 0))
            if self.out_aliases:
                self._alias_of = {}
        ack["receive_maximum"] = self.receive_max  # <= max_unreleased_per_client
        ack["maximum_packet_size"] = o.max_packet_size
        ack["topic_alias_maximum"] = o.topic_alias_maximum
        if o.max_qos < 2:
            ack["maximum_qos"] = o.max_qos

    # -- keep-alive -------------------------------------------------------------------------
    def _start_keepalive(self, asked: int, ack: dict[str, Any]) -> None:
        ka, most = asked, self.options.max_keepalive
        if not self.v5 and ka > most:  # 3.1.1 cannot be told another keep-alive
            raise Refused(R.SERVER_UNAVAILABLE, f"keep-alive {ka}s is over the limit of {most}s")
        if self.v5 and (ka > most or (ka == 0 and most < 65535)):
            ka = most  # the server's keep-alive [MQTT-3.2.2-21]
            ack["server_keep_alive"] = ka
        if ka:
            self._keepalive = ka * self.options.keepalive_grace
            keepalive(self.loop).watch(self)  # one loop timer for all connections

    def keepalive_expired(self) -> None:
        """A client silent for grace x keep-alive is gone [MQTT-3.1.2-24] (the wheel in
        ``keepalive.py`` looks again at a connection heard from meanwhile)."""
        log.info("MQTT %s: keep-alive timeout", self.link.peer)
        self._end(R.KEEP_ALIVE_TIMEOUT, "no packet within 1.5 x keep-alive")

    def _save_inbound(self, pid: int, dup: str | None) -> asyncio.Future[None] | None:
        return subscriptions.save_inbound(self, pid, dup)

    def _save_outbound(self, pid: int) -> asyncio.Future[None] | None:
        try:
            return subscriptions.save_outbound(self, pid)
        except LimitExceeded as e:  # the delivery cannot be saved: it goes back to its queue
            log.warning("MQTT %s: client %r closed: %s", self.link.peer, self.client_id, e)
            self._end(R.QUOTA_EXCEEDED, str(e))
            return None

    # -- the rest ------------------------------------------------------------------------------
    def _on_subscribe(self, p: Subscribe) -> None:
        subscriptions.subscribe(self, p)

    def _on_unsubscribe(self, p: Unsubscribe) -> None:
        subscriptions.unsubscribe(self, p)

    def _on_pingreq(self, p: PingReq) -> None:
        self._write(_PINGRESP)

    def _on_disconnect(self, p: Disconnect) -> None:
        if self.v5:
            asked = p.properties.get("session_expiry_interval")
            if asked is not None:
                if self.expiry == 0 and asked:
                    raise ProtocolError(
                        R.PROTOCOL_ERROR,
                        "[MQTT-3.14.2-2] session expiry cannot be set on DISCONNECT when "
                        "CONNECT gave 0",
                    )
                self.expiry = min(int(asked), self.options.max_session_expiry)
        self._disconnected = not (self.v5 and p.reason_code == R.DISCONNECT_WITH_WILL)
        self.closed = True
        self._cleanup(True)
        self.link.close()

    def _on_auth(self, p: Auth) -> None:
        raise ProtocolError(R.PROTOCOL_ERROR, "AUTH without an authentication method in CONNECT")

    def _on_connect_again(self, p: Connect) -> None:
        raise ProtocolError(R.PROTOCOL_ERROR, "[MQTT-3.1.0-2] a second CONNECT")

    _handlers: dict[type, Callable[[MqttSession, Any], None]] = {
        PubAck: Deliveries._on_puback,
        PubRec: Deliveries._on_pubrec,
        PubRel: PublishIn._on_pubrel,
        PubComp: Deliveries._on_pubcomp,
        Subscribe: _on_subscribe,
        Unsubscribe: _on_unsubscribe,
        PingReq: _on_pingreq,
        Disconnect: _on_disconnect,
        Auth: _on_auth,
        Connect: _on_connect_again,
    }


__all__ = ["MqttSession", "core_client_id"]
