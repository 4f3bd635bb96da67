"""MQTT packets -> bytes, for 3.1.1 and 5 (server and client packets alike).

v5-only fields and properties are left out for 3.1.1; reason codes become the 3.1.1 return
codes where 3.1.1 has them (CONNACK, SUBACK). Acks and DISCONNECT use the short forms the
spec allows when the reason code is 0 and there are no properties. The encoder refuses
(ValueError) what would make a packet malformed (and empty SUBSCRIBE / UNSUBSCRIBE lists),
so a bug in a caller cannot put such a packet on the wire.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from waystation.wire.mqtt_properties import (
    AUTH,
    CONNACK,
    CONNECT,
    DISCONNECT,
    PUBLISH,
    SUBACK,
    SUBSCRIBE,
    UNSUBACK,
    UNSUBSCRIBE,
    WILL,
    encode_properties,
    encode_vbi,
    string_bytes,
)
from waystation.wire.mqtt_types import (
    MQTT_5,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
)

__all__ = ["CONNACK_TO_311", "encode", "publish_qos0"]

_HDR = [bytes((b,)) for b in range(256)]
_NO_PROPS = b"\x00"
# v5 CONNACK reason code -> 3.1.1 return code; 1..5 pass through as 3.1.1 codes already.
CONNACK_TO_311 = {0x00: 0, 0x84: 1, 0x85: 2, 0x88: 3, 0x89: 3, 0x86: 4, 0x8C: 4, 0x87: 5,
                  0x8A: 5, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5}  # fmt: skip
_TOPICS: dict[str, bytes] = {}  # topic -> its encoded form; hot topics repeat
_TOPICS_MAX = 4096


def _topic(topic: str) -> bytes:
    b = _TOPICS.get(topic)
    if b is None:
        b = string_bytes(topic)
        if len(topic) < 256:  # bounded: a few MB at most
            if len(_TOPICS) >= _TOPICS_MAX:
                _TOPICS.clear()
            _TOPICS[topic] = b
    return b


def _pid(packet_id: int | None) -> bytes:
    if not packet_id or not 0 < packet_id < 65536:
        raise ValueError(f"packet identifier must be 1..65535, got {packet_id!r}")
    return packet_id.to_bytes(2, "big")


def _frame(b1: int, body: bytes) -> bytes:
    return _HDR[b1] + encode_vbi(len(body)) + body


def _publish(p: Publish, v: int) -> bytes:
    qos = p.qos
    if qos:
        if qos > 2:
            raise ValueError(f"PUBLISH QoS must be 0, 1 or 2, got {qos}")
        head = _topic(p.topic) + _pid(p.packet_id)
        b1 = 0x30 | (qos << 1) | (8 if p.dup else 0) | (1 if p.retain else 0)
    else:
        if p.dup:
            raise ValueError("[MQTT-3.3.1-2] a QoS 0 PUBLISH cannot have DUP set")
        head = _topic(p.topic)
        b1 = 0x31 if p.retain else 0x30
    if v == MQTT_5:
        props = p.properties
        head += encode_properties(props, PUBLISH) if props else _NO_PROPS
    payload = p.payload
    return _HDR[b1] + encode_vbi(len(head) + len(payload)) + head + payload


def publish_qos0(topic: str, payload: bytes) -> bytes:
    """``encode(Publish(topic, payload), MQTT_311)`` without the packet object: the bytes of
    the commonest delivery (QoS 0, no flags, no properties), on the fan-out hot path."""
    head = _TOPICS.get(topic)
    if head is None:
        head = _topic(topic)
    n = len(head) + len(payload)
    return b"\x30" + (_HDR[n] if n < 128 else encode_vbi(n)) + head + payload


def _connect(p: Connect, v: int) -> bytes:
    v5 = v == MQTT_5
    level = 5 if v5 else (p.protocol_level if p.protocol_level in (3, 4) else 4)
    flags = 2 if p.clean_start else 0
    tail = string_bytes(p.client_id)
    w = p.will
    if w is not None:
        if w.qos not in (0, 1, 2):
            raise ValueError(f"will QoS must be 0, 1 or 2, got {w.qos}")
        flags |= 4 | (w.qos << 3) | (0x20 if w.retain else 0)
        if v5:
            tail += encode_properties(w.properties, WILL)
        tail += string_bytes(w.topic) + len(w.payload).to_bytes(2, "big") + w.payload
    if p.username is not None:
        flags |= 0x80
        tail += string_bytes(p.username)
    if p.password is not None:
        if not v5 and p.username is None:
            raise ValueError("[MQTT-3.1.2-22] 3.1.1 allows a password only with a user name")
        flags |= 0x40
        tail += len(p.password).to_bytes(2, "big") + p.password
    head = string_bytes(p.protocol_name) + bytes((level, flags)) + p.keepalive.to_bytes(2, "big")
    if v5:
        head += encode_properties(p.properties, CONNECT)
    return _frame(0x10, head + tail)


def _connack(p: ConnAck, v: int) -> bytes:
    sp = 1 if p.session_present else 0
    if v != MQTT_5:
        return _frame(0x20, bytes((sp, CONNACK_TO_311.get(p.reason_code, 3))))
    return _frame(0x20, bytes((sp, p.reason_code)) + encode_properties(p.properties, CONNACK))


def _ack(b1: int, kind: int) -> Callable[[Any, int], bytes]:
    def enc(p: PubAck | PubRec | PubRel | PubComp, v: int) -> bytes:
        pid = _pid(p.packet_id)
        if v != MQTT_5 or (not p.reason_code and not p.properties):
            return _HDR[b1] + b"\x02" + pid
        if not p.properties:
            return _HDR[b1] + b"\x03" + pid + _HDR[p.reason_code]
        return _frame(b1, pid + _HDR[p.reason_code] + encode_properties(p.properties, kind))

    return enc


def _subscribe(p: Subscribe, v: int) -> bytes:
    if not p.subscriptions:
        raise ValueError("[MQTT-3.8.3-2] SUBSCRIBE needs at least one topic filter")
    parts = [_pid(p.packet_id)]
    v5 = v == MQTT_5
    if v5:
        parts.append(encode_properties(p.properties, SUBSCRIBE))
    for s in p.subscriptions:
        if s.qos not in (0, 1, 2) or s.retain_handling not in (0, 1, 2):
            raise ValueError(f"bad subscription options in {s!r}")
        o = s.qos
        if v5:
            o |= (4 if s.no_local else 0) | (8 if s.retain_as_published else 0)
            o |= s.retain_handling << 4
        parts.append(string_bytes(s.filter) + _HDR[o])
    return _frame(0x82, b"".join(parts))


def _suback(p: SubAck, v: int) -> bytes:
    if v != MQTT_5:
        codes = bytes(c if c < 3 else 0x80 for c in p.reason_codes)
        return _frame(0x90, _pid(p.packet_id) + codes)
    props = encode_properties(p.properties, SUBACK)
    return _frame(0x90, _pid(p.packet_id) + props + bytes(p.reason_codes))


def _unsubscribe(p: Unsubscribe, v: int) -> bytes:
    if not p.filters:
        raise ValueError("[MQTT-3.10.3-2] UNSUBSCRIBE needs at least one topic filter")
    parts = [_pid(p.packet_id)]
    if v == MQTT_5:
        parts.append(encode_properties(p.properties, UNSUBSCRIBE))
    parts += [string_bytes(f) for f in p.filters]
    return _frame(0xA2, b"".join(parts))


def _unsuback(p: UnsubAck, v: int) -> bytes:
    if v != MQTT_5:
        return _frame(0xB0, _pid(p.packet_id))
    props = encode_properties(p.properties, UNSUBACK)
    return _frame(0xB0, _pid(p.packet_id) + props + bytes(p.reason_codes))


def _disconnect(p: Disconnect, v: int) -> bytes:
    if v != MQTT_5 or (not p.reason_code and not p.properties):
        return b"\xe0\x00"
    if not p.properties:
        return b"\xe0\x01" + _HDR[p.reason_code]
    return _frame(0xE0, _HDR[p.reason_code] + encode_properties(p.properties, DISCONNECT))


def _auth(p: Auth, v: int) -> bytes:
    if v != MQTT_5:
        raise ValueError("AUTH exists only in MQTT 5")
    if not p.reason_code and not p.properties:
        return b"\xf0\x00"
    return _frame(0xF0, _HDR[p.reason_code] + encode_properties(p.properties, AUTH))


_ENCODERS: dict[type, Callable[[Any, int], bytes]] = {
    Publish: _publish,
    PubAck: _ack(0x40, 4),
    PubRec: _ack(0x50, 5),
    PubRel: _ack(0x62, 6),
    PubComp: _ack(0x70, 7),
    Connect: _connect,
    ConnAck: _connack,
    Subscribe: _subscribe,
    SubAck: _suback,
    Unsubscribe: _unsubscribe,
    UnsubAck: _unsuback,
    PingReq: lambda p, v: b"\xc0\x00",
    PingResp: lambda p, v: b"\xd0\x00",
    Disconnect: _disconnect,
    Auth: _auth,
}


def encode(packet: Packet, version: int) -> bytes:
    """The bytes of ``packet`` in protocol ``version`` (MQTT_311 or MQTT_5)."""
    return _ENCODERS[type(packet)](packet, version)
