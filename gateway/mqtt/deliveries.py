"""PUBLISH out: core deliveries to the client, and its PUBACK / PUBREC / PUBCOMP.

The hot path is :meth:`Deliveries.deliver`: the topic of the last address is reused, the
QoS is one comparison, a v5 delivery builds properties only when the message has any.

Topic aliases out (v5): a client whose CONNECT allows ``topic_alias_maximum`` > 0 gets an
alias for each new topic, with the topic, until that many are in use; a topic that has one
goes as the alias and an empty topic name.  Aliases are never reassigned (a busy client's
topics are usually few and stable; reassigning costs the saving on every churned topic), so
topics beyond the client's maximum go in full.  The map lives as long as the connection.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque
from typing import TYPE_CHECKING

from waystation.core.consumer import ConsumerError, Delivery
from waystation.core.message import RETAINED, Message, now_ms
from waystation.core.session import Outcome, Session
from waystation.gateway.link import Link
from waystation.gateway.mqtt.inflight import RELEASED, SENT, Entry, Outbound
from waystation.gateway.mqtt.mapping import FLAGS, QOS2, RETAIN, delivery_properties
from waystation.gateway.mqtt.topics import address_to_topic
from waystation.wire.mqtt import MQTT_5, MQTT_311, PubAck, PubComp, Publish, PubRec, PubRel, encode
from waystation.wire.mqtt_encode import publish_qos0
from waystation.wire.mqtt_properties import encode_vbi, string_bytes

if TYPE_CHECKING:
    from waystation.gateway.mqtt.subscriptions import Sub

log = logging.getLogger("waystation.mqtt")
PACKET_IDENTIFIER_NOT_FOUND = 0x92
_U16 = struct.Struct(">H").pack
_HEADS: dict[str, bytes] = {}  # topic -> its encoded form (hot topics repeat; bounded)
_HEADS_MAX = 4096


def publish_qos1(topic: str, payload: bytes, pid: int) -> bytes:
    """``encode(Publish(topic, payload, 1, packet_id=pid), MQTT_311)`` without the packet
    object: the QoS 1 delivery with no flags, on the hot path."""
    head = _HEADS.get(topic)
    if head is None:
        head = string_bytes(topic)
        if len(topic) < 256:
            if len(_HEADS) >= _HEADS_MAX:
                _HEADS.clear()
            _HEADS[topic] = head
    n = len(head) + 2 + len(payload)
    return b"\x32" + encode_vbi(n) + head + _U16(pid) + payload


class Deliveries:
    """Mixed into ``MqttSession``: what it needs is declared here."""

    __slots__ = ()

    session: Session | None
    link: Link
    outbound: Outbound
    v5: bool
    closed: bool
    max_out_packet: int
    out_aliases: int
    _alias_of: dict[str, int] | None
    _hold_out: list[bytes] | None
    expiry: int
    _paused_writing: bool

    if TYPE_CHECKING:

        def _write(self, data: bytes) -> None: ...
        def _packet(self, packet: object) -> None: ...
        def _end(self, reason: int, text: str) -> None: ...
        def _save_outbound(self, pid: int) -> asyncio.Future[None] | None: ...

    def deliver(self, s: Sub, d: Delivery) -> None:
        """One core delivery to subscription ``s``."""
        msg = d.ref.message
        address = msg.address
        if address == s.last_address:
            topic = s.last_topic
        else:
            if s.dollar_blind and address[:1] == "$":  # [MQTT-4.7.2-1]
                if not s.presettled:
                    self.session.settle(d.consumer, d.tag)  # type: ignore[union-attr]
                return
            topic = s.last_topic = address_to_topic(address)
            s.last_address = address
        if msg.durable:
            a = msg._ann
            f = a.get(FLAGS) if a else None
            pq = 2 if isinstance(f, int) and f & QOS2 else 1
            qos = s.qos if s.qos < pq else pq
        else:
            qos = 0
        if qos == 0:
            if self.v5 or msg._ann or self._hold_out is not None:
                self._publish_out(s, msg, topic, 0, None)
            else:  # the common case, inline: 3.1.1, nothing to flag
                self.link.write(publish_qos0(topic, msg.body))
            if not s.presettled:
                self.session.settle(d.consumer, d.tag)  # type: ignore[union-attr]
            return
        out = self.outbound
        if len(out.entries) >= out.limit:  # the client's receive maximum, all subscriptions
            if out.backlog is None:
                out.backlog = deque()
            out.backlog.append((s, d))
            self._window_full()
            return
        if qos == 2 and self.expiry:
            self._deliver_qos2(s, d, msg, topic)
            return
        pid = out.add(d.consumer, d.tag, qos)
        if qos == 1 and not self.v5 and not msg._ann:  # 3.1.1, no flags: the bytes, inline
            if self._hold_out is None:
                self.link.write(publish_qos1(topic, msg.body, pid))
            else:
                self._write(publish_qos1(topic, msg.body, pid))
        elif not self._publish_out(s, msg, topic, qos, pid):
            self._settle_out(pid)
            self._free(pid)

    def _deliver_qos2(self, s: Sub, d: Delivery, msg: Message, topic: str) -> None:
        """QoS 2 in a persistent session: the packet id is saved with the message id before
        the PUBLISH goes, and a message sent before keeps its id (DUP set)."""
        out = self.outbound
        prior = out.resend.pop(msg.id, None) if out.resend else None
        if prior is not None:
            out.entries[prior] = Entry(d.consumer, d.tag, 2, SENT, msg.id)  # saved as it was
            if not self._publish_out(s, msg, topic, 2, prior, dup=True):
                self._settle_out(prior)
                self._free(prior)
                self._save_outbound(prior)  # over: its record goes
            return
        pid = out.add(d.consumer, d.tag, 2)
        out.entries[pid].msg_id = msg.id
        saved = self._save_outbound(pid)  # one record for this packet id
        if saved is None or saved.done():
            self._publish_qos2(s, msg, topic, pid)
        else:
            saved.add_done_callback(lambda f: self._publish_qos2(s, msg, topic, pid, f))

    def _publish_qos2(
        self, s: Sub, msg: Message, topic: str, pid: int, f: asyncio.Future[None] | None = None
    ) -> None:
        if self.closed:
            return
        if f is not None and (f.cancelled() or f.exception() is not None):
            self._end(0x80, "the node could not save the delivery state")
            return
        if not self._publish_out(s, msg, topic, 2, pid):
            self._settle_out(pid)
            self._free(pid)
            self._save_outbound(pid)

    def _publish_out(
        self, s: Sub, msg: Message, topic: str, qos: int, pid: int | None, dup: bool = False
    ) -> bool:
        a = msg._ann
        retain = False
        if a:
            f = a.get(FLAGS)
            retain = RETAINED in a or (
                s.retain_as_published and isinstance(f, int) and bool(f & RETAIN)
            )
        if self.v5:
            if msg._props or msg.expiration or msg._std is not None or a:
                props = delivery_properties(msg, now_ms())
            else:
                props = {}
            if s.sub_id:
                props["subscription_identifier"] = [s.sub_id]
            new_alias = False
            aliases = self._alias_of  # a dict when the client accepts aliases
            if aliases is not None:
                alias = aliases.get(topic)
                if alias is not None:  # known to the client: the alias alone
                    props["topic_alias"] = alias
                    topic = ""
                elif len(aliases) < self.out_aliases:  # a new one: alias and topic
                    alias = aliases[topic] = len(aliases) + 1
                    props["topic_alias"] = alias
                    new_alias = True
            data = encode(Publish(topic, msg.body, qos, retain, dup, pid, props), MQTT_5)
            if self.max_out_packet and len(data) > self.max_out_packet:
                if new_alias and aliases is not None:  # never sent: unknown to the client
                    del aliases[topic]
                log.info(
                    "MQTT %s: a message over the client's maximum packet size is dropped",
                    self.link.peer,
                )
                return False  # [MQTT-3.1.2-25]
        else:
            data = encode(Publish(topic, msg.body, qos, retain, dup, pid), MQTT_311)
        self._write(data)
        return True

    def _window_full(self) -> None:
        if not self.outbound.window_paused:
            self.outbound.window_paused = True
            self.session.pause()  # type: ignore[union-attr]

    def _settle_out(self, pid: int) -> None:
        """The client took ``pid`` (PUBACK or PUBREC): the core forgets the message."""
        e = self.outbound.entries.get(pid)
        if e is not None:
            self._settle(e)

    def _settle(self, e: Entry) -> None:
        consumer = e.consumer
        if consumer is None:
            return
        e.consumer = None
        try:
            self.session.settle(consumer, e.tag, Outcome.ACCEPTED)  # type: ignore[union-attr]
        except ConsumerError:
            pass  # unsubscribed meanwhile: the message went back to its queue

    def _free(self, pid: int) -> None:
        out = self.outbound
        out.entries.pop(pid, None)
        if out.backlog or out.window_paused:
            self._drain()

    def _drain(self) -> None:
        out = self.outbound
        backlog = out.backlog
        while backlog and len(out.entries) < out.limit and not self.closed:
            s, d = backlog.popleft()
            if not s.closed:
                self.deliver(s, d)
        if not backlog and out.window_paused and len(out.entries) < out.limit:
            out.window_paused = False
            if not self._paused_writing and not self.closed:
                self.session.resume()  # type: ignore[union-attr]

    def _on_puback(self, p: PubAck) -> None:
        """Settle a QoS 1 delivery.  Only from a batch of packets (``MqttSession._run``):
        the consumer is acknowledged here and dispatched once at the end of the batch
        (what ``Session.settle`` does per message), not once per PUBACK."""
        out = self.outbound
        e = out.entries.pop(p.packet_id, None)
        if e is None:
            return  # unknown id: nothing to settle (v5 allows no answer)
        if e.qos != 1:
            out.entries[p.packet_id] = e  # not a QoS 1 delivery: ignored
            return
        consumer = e.consumer
        if consumer is not None:  # the slot is free first, so the next delivery fits at once
            e.consumer = None
            try:
                consumer.ack(e.tag)
            except ConsumerError:
                pass  # unsubscribed meanwhile: the message went back to its queue
            else:
                prior = out.acked
                if prior is not consumer:
                    out.acked = consumer
                    if prior is not None:
                        prior.queue.dispatch()
        if out.backlog or out.window_paused:
            self._drain()

    def _on_pubrec(self, p: PubRec) -> None:
        pid = p.packet_id
        e = self.outbound.entries.get(pid)
        if e is None or e.qos != 2:
            self._packet(PubRel(pid, PACKET_IDENTIFIER_NOT_FOUND if self.v5 else 0))
            return
        if e.state == SENT:
            self._settle_out(pid)
            if p.reason_code >= 0x80:  # the client refused it: the exchange ends here
                self._free(pid)
                self._save_outbound(pid)
                return
            e.state = RELEASED
            self._save_outbound(pid)  # the same size as before: never over a quota
        self._write(b"\x62\x02" + pid.to_bytes(2, "big"))  # PUBREL

    def _on_pubcomp(self, p: PubComp) -> None:
        e = self.outbound.entries.get(p.packet_id)
        if e is None or e.state != RELEASED:
            return
        self._free(p.packet_id)
        self._save_outbound(p.packet_id)


__all__ = ["Deliveries"]
