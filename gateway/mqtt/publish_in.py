"""PUBLISH in: a client's messages to the core, and the PUBACK / PUBREC / PUBCOMP it gets.

A QoS 1 message is acknowledged once it is on disk.  QoS 2 (PUBREC once on disk) must not
be routed twice for one packet id before PUBREL [MQTT-4.3.3-9], across reconnects and node
crashes too.  In a session that ends with its connection the ids in memory do it.  In a
persistent session each QoS 2 message gets a duplicate id (``_WS_DUPL_ID``) that is saved
with its packet id *before* the message is routed; a resend of that packet id is routed
again with the same duplicate id, so the core's duplicate detection (written in the same
journal batch as the message) drops it if the first one got through, and routes it if the
node died in between.  Each id is saved as a record of its own (dropped at PUBREL), so the
cost of a write does not grow with the ids held; and a client holds at most
``max_unreleased_per_client`` ids (3.1.1: past it the connection is closed; v5: it bounds the
receive maximum advertised, 0x93 past it).  A resend of a held id (DUP) holds no new one.
Each topic is mapped and checked once per connection; the QoS 0/1 path is a dict lookup,
the message, and the core send.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import uuid
from typing import TYPE_CHECKING

from waystation.core.limits import LimitExceeded
from waystation.core.message import DEFAULT_PRIORITY, DUPLICATE_ID, Message, now_ms
from waystation.core.queue import MULTICAST
from waystation.core.session import Session
from waystation.gateway.link import Link
from waystation.gateway.mqtt.errors import REFUSALS, refusal_reason
from waystation.gateway.mqtt.inflight import NO_ENTRIES, Inbound
from waystation.gateway.mqtt.mapping import message_from_publish
from waystation.gateway.mqtt.options import MqttOptions
from waystation.gateway.mqtt.topics import topic_to_address
from waystation.wire.mqtt import (
    ProtocolError,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    validate_topic_name,
)

if TYPE_CHECKING:
    from waystation.core.engine import Engine

log = logging.getLogger("waystation.mqtt")
R = ReasonCode
LOGGED_REFUSALS = 10  # refused PUBLISHes logged at info per connection, the rest at debug
_PUBACK = struct.Struct(">HH").pack  # (0x4002, packet id): PUBACK, success


class PublishIn:
    """Mixed into ``MqttSession``: what it needs is declared here."""

    # its own state (the session's other slots are MqttSession's: one base may have slots)
    __slots__ = ("in_aliases", "_addresses", "_pub_address", "_refusals")

    in_aliases: dict[int, str]
    _addresses: dict[str, str | Exception]  # topic -> its address, or why it is refused
    _pub_address: str | None  # published to in this batch (``gate_batch``)
    _refusals: int  # PUBLISHes refused on this connection (the first few are logged at info)
    _hold_out: list[bytes] | None

    engine: Engine
    session: Session | None
    link: Link
    options: MqttOptions
    v5: bool
    connected: bool
    closed: bool
    user: str | None
    _now: int
    expiry: int
    core_id: str
    client_id: str
    receive_max: int  # QoS 1/2 PUBLISHes unacknowledged (v5: the advertised receive maximum)
    max_unreleased: int  # QoS 2 packet ids held awaiting PUBREL (max_unreleased_per_client)

    if TYPE_CHECKING:

        def _write(self, data: bytes) -> None: ...
        def _packet(self, packet: object) -> None: ...
        def _end(self, reason: int, text: str) -> None: ...
        def _save_inbound(self, pid: int, dup: str | None) -> asyncio.Future[None] | None: ...

        @property
        def inbound(self) -> Inbound: ...

    def _on_publish(self, p: Publish) -> None:
        if not self.connected:
            raise ProtocolError(R.PROTOCOL_ERROR, "[MQTT-3.1.0-1] expected CONNECT, got Publish")
        topic = p.topic
        props = p.properties
        if props and self.v5:
            alias = props.get("topic_alias")
            if alias is not None:
                topic = self._alias(alias, topic)
        address = self._addresses.get(topic)
        if address is None:
            address = self._address_for(topic)
        qos = p.qos
        if qos:
            if qos == 2 and p.packet_id in self.inbound.awaiting_rel:  # holds no new id
                self._resent(p, address)
                return
            if self.v5 or qos > self.options.max_qos:
                self._quota(p)
            if qos == 2 and len(self.inbound.awaiting_rel) >= self.max_unreleased:
                self._unreleased_limit()
                return
        if address.__class__ is not str:
            assert isinstance(address, Exception)
            self._refuse_publish(p, *refusal_reason(address))
            return
        retain = p.retain
        if props or retain or qos == 2 or self.user is not None:
            msg = message_from_publish(
                self.engine.ids(), address, p.payload, qos, retain, props, self._now, self.user
            )
            if qos == 2 and self.expiry:
                self._qos2_persistent(p, msg)
                return
        else:  # the commonest PUBLISH: what ``message_from_publish`` makes of it, inline
            msg = Message(
                self.engine.ids(), address, p.payload, {}, qos > 0, DEFAULT_PRIORITY, self._now
            )
        session = self.session
        assert session is not None
        try:
            if retain:
                fut = session.send(msg, routing=MULTICAST, retain=True)
            else:
                fut = session.send(msg, routing=MULTICAST)
        except REFUSALS as e:
            self._refuse_publish(p, *refusal_reason(e))
            return
        if qos:
            if fut is None and qos == 1:  # not stored (no durable queue): PUBACK now
                if self._hold_out is None:
                    self.link.write(_PUBACK(0x4002, p.packet_id))
                else:
                    self._write(_PUBACK(0x4002, p.packet_id))
            else:
                self._acknowledge(p, fut)
        if address is not self._pub_address:  # gated once per batch (``gate_batch``)
            if self._pub_address is not None:
                self._gate(self._pub_address)
            self._pub_address = address

    def gate_batch(self) -> None:
        """After a batch of packets: is the address it published to full (BLOCK policy)?
        Once per batch and address, not per message: reading stops before the next batch
        either way."""
        address = self._pub_address
        if address is not None:
            self._pub_address = None
            self._gate(address)

    def _send(self, msg: Message, retain: bool) -> asyncio.Future[None] | None:
        session = self.session
        assert session is not None
        if retain:
            return session.send(msg, routing=MULTICAST, retain=True)
        return session.send(msg, routing=MULTICAST)

    def _gate(self, address: str) -> None:
        """An address full under the BLOCK policy: stop reading until it has room."""
        gate = self.session.blocked(address)  # type: ignore[union-attr]
        if gate is not None and not self.inbound.blocked:
            self.inbound.blocked = True
            self.link.pause_reading()
            gate.add_done_callback(self._unblock)

    def _unblock(self, _: object) -> None:
        self.inbound.blocked = False
        if not self.closed:
            self.link.resume_reading()

    def _quota(self, p: Publish) -> None:
        if p.qos > self.options.max_qos:
            raise ProtocolError(R.QOS_NOT_SUPPORTED, f"QoS {p.qos} is above the server's maximum")
        if self.v5 and self.inbound.pending >= self.receive_max:
            raise ProtocolError(R.RECEIVE_MAXIMUM_EXCEEDED, "[MQTT-3.3.4-7] receive maximum")

    def _unreleased_limit(self) -> None:
        """A client holding ``max_unreleased_per_client`` QoS 2 ids sent one more: each id
        is kept (and saved, persistent sessions) until PUBREL, so this is where it stops."""
        n = len(self.inbound.awaiting_rel)
        why = f"{n} QoS 2 messages awaiting PUBREL (limit max_unreleased_per_client)"
        log.warning("MQTT %s: client %r closed: %s", self.link.peer, self.client_id, why)
        self._end(R.RECEIVE_MAXIMUM_EXCEEDED, why)

    def _alias(self, alias: int, topic: str) -> str:
        if not 0 < alias <= self.options.topic_alias_maximum:
            raise ProtocolError(R.TOPIC_ALIAS_INVALID, f"[MQTT-3.3.2-9] topic alias {alias}")
        if topic:
            if self.in_aliases is NO_ENTRIES:
                self.in_aliases = {}
            self.in_aliases[alias] = topic
            return topic
        known = self.in_aliases.get(alias)
        if known is None:
            raise ProtocolError(R.PROTOCOL_ERROR, f"topic alias {alias} was never set")
        return known

    def _address_for(self, topic: str) -> str | Exception:
        """The address of a topic this connection had not used, checked once: the answer
        (or a lasting refusal, without its traceback) is kept for the connection's life; a
        quota refusal is not kept, since the quota frees up as unused addresses go."""
        validate_topic_name(topic)
        try:
            address: str | Exception = topic_to_address(topic)
            assert self.session is not None and isinstance(address, str)
            self.session.check_send(address, MULTICAST)
        except LimitExceeded as e:
            return e
        except REFUSALS as e:
            address = e.with_traceback(None)
        if self._addresses is NO_ENTRIES:
            self._addresses = {}
        if len(self._addresses) < 10_000:
            self._addresses[topic] = address
        return address

    def _refuse_publish(self, p: Publish, reason: int, text: str) -> None:
        """v5: the reason in PUBACK/PUBREC; 3.1.1 has none, so the message is dropped and
        acknowledged as usual [MQTT-3.3.5-2]; QoS 0 is dropped either way."""
        # a flood of refused publishes must not become a flood of log lines
        self._refusals += 1
        level = logging.INFO if self._refusals <= LOGGED_REFUSALS else logging.DEBUG
        log.log(level, "MQTT %s: PUBLISH to %r refused: %s", self.link.peer, p.topic, text)
        if self._refusals == LOGGED_REFUSALS:
            log.info("MQTT %s: further refused PUBLISHes logged at debug", self.link.peer)
        if p.qos == 0:
            return
        assert p.packet_id is not None
        if not self.v5:
            reason, props = 0, {}
        else:
            props = {"reason_string": text[:200]}
        if p.qos == 1:
            self._packet(PubAck(p.packet_id, reason, props))
        elif reason:
            self._packet(PubRec(p.packet_id, reason, props))
        else:  # 3.1.1: the exchange goes on as if the message had been taken
            self.inbound.awaiting_rel[p.packet_id] = None
            self.inbound.pending += 1
            self._packet(PubRec(p.packet_id))

    # -- acknowledgements ------------------------------------------------------------------
    def _acknowledge(self, p: Publish, fut: asyncio.Future[None] | None) -> None:
        """PUBACK / PUBREC once the message is on disk."""
        pid = p.packet_id
        assert pid is not None
        inbound = self.inbound
        inbound.pending += 1
        if p.qos == 2:
            inbound.awaiting_rel[pid] = None
        if fut is None or (fut.done() and not fut.cancelled() and fut.exception() is None):
            self._acked(p.qos, pid)
            return
        fut.add_done_callback(lambda f: self._stored(f, p.qos, pid))

    def _stored(self, f: asyncio.Future[None], qos: int, pid: int) -> bool:
        """Whether ``f`` (a store write) succeeded; if so the acknowledgement goes out."""
        if self.closed:
            return False
        if f.cancelled() or f.exception() is not None:
            exc = None if f.cancelled() else f.exception()
            log.warning("MQTT %s: store write failed: %s", self.link.peer, exc)
            self._end(R.UNSPECIFIED_ERROR, "the node could not write the message to its store")
            return False
        self._acked(qos, pid)
        return True

    def _acked(self, qos: int, pid: int) -> None:
        if qos == 1:
            self.inbound.pending -= 1
            self._write(b"\x40\x02" + pid.to_bytes(2, "big"))  # PUBACK, success
        else:
            self._write(b"\x50\x02" + pid.to_bytes(2, "big"))  # PUBREC, success

    # -- QoS 2 ---------------------------------------------------------------------------------
    def _qos2_persistent(self, p: Publish, msg: Message) -> None:
        """Save the packet id with a new duplicate id, then route, then PUBREC."""
        pid = p.packet_id
        assert pid is not None
        inbound = self.inbound
        dup_id = f"mqtt/{self.core_id}/{uuid.uuid4().hex}"
        try:
            saved = self._save_inbound(pid, dup_id)
        except LimitExceeded as e:  # the user's saved state is at its quota
            if self.v5:
                self._refuse_publish(p, R.QUOTA_EXCEEDED, str(e))
            else:  # 3.1.1 has no refusal for it: the client retries after reconnecting
                log.warning("MQTT %s: client %r closed: %s", self.link.peer, self.client_id, e)
                self._end(R.QUOTA_EXCEEDED, str(e))
            return
        inbound.awaiting_rel[pid] = None
        inbound.dup_ids[pid] = dup_id
        inbound.pending += 1
        msg.application_properties[DUPLICATE_ID] = dup_id
        self._route_after(saved, p, msg)

    def _resent(self, p: Publish, address: str | Exception) -> None:
        """A PUBLISH for a packet id awaiting PUBREL: a resend [MQTT-4.3.3-9]."""
        pid = p.packet_id
        assert pid is not None
        inbound = self.inbound
        dup_id = inbound.dup_ids.get(pid)
        if dup_id is None or not isinstance(address, str):  # not persistent: in memory
            self._packet(PubRec(pid))
            return
        if pid in inbound.routing:
            return  # the first is still on its way; its PUBREC will answer both
        msg = message_from_publish(
            self.engine.ids(), address, p.payload, 2, p.retain, p.properties, now_ms(), self.user
        )
        msg.application_properties[DUPLICATE_ID] = dup_id  # dropped by the core if it got in
        self._route_after(None, p, msg)

    def _route_after(self, saved: asyncio.Future[None] | None, p: Publish, msg: Message) -> None:
        pid = p.packet_id
        assert pid is not None
        self.inbound.routing[pid] = None

        def route(f: asyncio.Future[None] | None = None) -> None:
            if f is not None and not self._stored_state(f):
                return
            try:
                fut = self._send(msg, p.retain)
            except REFUSALS as e:
                self.inbound.routing.pop(pid, None)
                self._refuse_publish(p, *refusal_reason(e))
                return
            if fut is None or fut.done():
                self.inbound.routing.pop(pid, None)
                if fut is None:
                    self._acked(2, pid)
                else:
                    self._stored(fut, 2, pid)
                return
            fut.add_done_callback(lambda g: self._routed(g, pid))

        if saved is None or saved.done():
            route(saved)
        else:
            saved.add_done_callback(route)

    def _routed(self, f: asyncio.Future[None], pid: int) -> None:
        self.inbound.routing.pop(pid, None)
        self._stored(f, 2, pid)

    def _stored_state(self, f: asyncio.Future[None]) -> bool:
        if self.closed:
            return False
        if f.cancelled() or f.exception() is not None:
            self._end(R.UNSPECIFIED_ERROR, "the node could not save the session state")
            return False
        return True

    def _on_pubrel(self, p: PubRel) -> None:
        inbound = self.inbound
        pid = p.packet_id
        if pid not in inbound.awaiting_rel:
            self._packet(PubComp(pid, R.PACKET_IDENTIFIER_NOT_FOUND if self.v5 else 0))
            return
        inbound.awaiting_rel.pop(pid, None)
        inbound.pending = max(0, inbound.pending - 1)
        if inbound.dup_ids.pop(pid, None) is None:
            self._write(b"\x70\x02" + pid.to_bytes(2, "big"))
            return
        saved = self._save_inbound(pid, None)  # the id is free again once the store says so
        if saved is None or saved.done():
            self._write(b"\x70\x02" + pid.to_bytes(2, "big"))
        else:
            saved.add_done_callback(
                lambda f: (
                    self._write(b"\x70\x02" + pid.to_bytes(2, "big"))
                    if self._stored_state(f)
                    else None
                )
            )


__all__ = ["PublishIn"]
