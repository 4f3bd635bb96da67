"""Sans-I/O MQTT 3.1.1 and 5.0 codec: bytes in -> packets out, packets -> bytes.

:class:`MqttParser` is the server's reader of one client connection by default (the first
packet must be CONNECT, whose protocol level sets :attr:`MqttParser.version`); given a
``version`` it is a client's reader of a server instead. It checks every rule that can be
checked from the bytes alone and names the normative statement it enforces; what needs
session state (topic alias ranges, receive maximum, packet ids in use) is the adapter's.

Errors: :class:`MalformedPacket` where the spec says "Malformed Packet" (reason 0x81, or
0x95 for a packet over ``max_packet_size``, raised as soon as the length is read), and
:class:`ProtocolError` where it says "Protocol Error" or the packet is well formed but not
allowed (0x82, or a more precise code: 0x84 unsupported version, 0x85 client identifier,
0x90 topic name, 0x94 topic alias), following the spec's own words packet by packet: so a
PUBLISH with QoS 3 is malformed [MQTT-3.3.1-4] while a SUBSCRIBE asking for QoS 3 is a
protocol error in v5 (malformed in 3.1.1), and a repeated property is a protocol error.
After an error the parser is dead: every later :meth:`~MqttParser.feed` raises it again;
the packets decoded before the error in the same feed are on ``error.packets``.

Topic filters in SUBSCRIBE and UNSUBSCRIBE are only checked as strings here: the adapter
runs :func:`validate_topic_filter` on each, so that one bad filter is refused in the SUBACK
(0x8F, or 0x80 in 3.1.1) instead of closing the connection. Topic names in PUBLISH and
in a will are checked here (:func:`validate_topic_name`).

The encoder is :func:`waystation.wire.mqtt_encode.encode`, re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable

from waystation.wire.mqtt_encode import encode
from waystation.wire.mqtt_properties import WILL, decode_properties, read_binary, read_string
from waystation.wire.mqtt_types import (
    MQTT_5,
    MQTT_31,
    MQTT_311,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    MalformedPacket,
    MqttError,
    Packet,
    PingReq,
    PingResp,
    Properties,
    ProtocolError,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    SubAck,
    Subscribe,
    SubscriptionRequest,
    UnsubAck,
    Unsubscribe,
    Will,
    validate_topic_filter,
    validate_topic_name,
)

__all__ = [
    "MQTT_31", "MQTT_311", "MQTT_5", "Auth", "ConnAck", "Connect", "Disconnect",
    "MalformedPacket", "MqttError", "MqttParser", "Packet", "PingReq", "PingResp",
    "ProtocolError", "PubAck", "PubComp", "PubRec", "PubRel", "Publish", "ReasonCode",
    "SubAck", "Subscribe", "SubscriptionRequest", "UnsubAck", "Unsubscribe", "Will", "encode",
    "validate_topic_filter", "validate_topic_name",
]  # fmt: skip

_NAMES = ("reserved(0)", "CONNECT", "CONNACK", "PUBLISH", "PUBACK", "PUBREC", "PUBREL",
          "PUBCOMP", "SUBSCRIBE", "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "PINGREQ", "PINGRESP",
          "DISCONNECT", "AUTH")  # fmt: skip
_FROM_SERVER = frozenset({2, 9, 11, 13})  # never sent by a client
_FROM_CLIENT = frozenset({1, 8, 10, 12})  # never sent by a server
_PROTOCOLS = {("MQTT", MQTT_311), ("MQTT", MQTT_5), ("MQIsdp", MQTT_31)}
_CONNACK_FROM_311 = {0: 0x00, 1: 0x84, 2: 0x85, 3: 0x88, 4: 0x86, 5: 0x87}
_SUBACK_311 = frozenset({0, 1, 2, 0x80})
# Reason codes each v5 packet may carry (spec 2.4 and each packet's reason code table).
_CODES = {
    2: frozenset({0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A,
                  0x8C, 0x90, 0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F}),
    4: frozenset({0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99}),
    6: frozenset({0x00, 0x92}),
    9: frozenset({0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2}),
    11: frozenset({0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91}),
    14: frozenset({0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F,
                   0x90, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D,
                   0x9E, 0x9F, 0xA0, 0xA1, 0xA2}),
    15: frozenset({0x00, 0x18, 0x19}),
}  # fmt: skip
_CODES[5] = _CODES[4]
_CODES[7] = _CODES[6]
_ACK_TYPES: dict[int, type[PubAck | PubRec | PubRel | PubComp]] = {
    4: PubAck, 5: PubRec, 6: PubRel, 7: PubComp,
}  # fmt: skip
# The properties of every decoded packet that has none (3.1.1, or none sent): shared, so
# the hot packets allocate no dict; read-only, like the rest of a decoded packet.
_NO_PROPS: Properties = {}
# Raw PUBLISH topic -> the checked topic, shared by all connections (hot topics repeat);
# only short topics, so the cache stays small (a few MB at most) whatever clients send.
_TOPICS: dict[bytes, str] = {}
_TOPICS_MAX = 4096
_TOPIC_CACHED_BELOW = 256


def _topic(raw: bytes) -> str:
    """Check a PUBLISH topic name (from its bytes), remembering it if short."""
    if b"+" in raw or b"#" in raw:
        raise ProtocolError(0x90, f"[MQTT-3.3.2-2] wildcard in topic name {raw[:200]!r}")
    topic, _ = read_string(len(raw).to_bytes(2, "big") + raw, 0, len(raw) + 2, "topic name")
    if topic and len(raw) < _TOPIC_CACHED_BELOW:
        if len(_TOPICS) >= _TOPICS_MAX:
            _TOPICS.clear()
        _TOPICS[raw] = topic
    return topic


def _check_code(ptype: int, code: int) -> None:
    if code not in _CODES[ptype]:
        raise ProtocolError(0x82, f"reason code 0x{code:02X} is not defined for {_NAMES[ptype]}")


class MqttParser:
    """Incremental parser of one connection: :meth:`feed` bytes, get whole packets back."""

    __slots__ = ("max_packet_size", "max_client_id", "version", "_server", "_connected",
                 "_buf", "_need", "_error")  # fmt: skip

    def __init__(
        self,
        max_packet_size: int = 1 << 20,
        max_client_id: int = 256,
        *,
        version: int | None = None,
    ) -> None:
        self.max_packet_size = max_packet_size
        self.max_client_id = max_client_id
        self.version = MQTT_311 if version is None else version
        self._server = version is None  # reading a client: CONNECT first, then never again
        self._connected = version is not None
        # an incomplete packet: b"" (no buffer object) until bytes are left over, a bytearray
        # only while a packet too big for one read accumulates
        self._buf: bytes | bytearray = b""
        self._need = 0  # do not parse again until the buffer holds this many bytes
        self._error: MqttError | None = None

    def feed(self, data: bytes | bytearray | memoryview) -> list[Packet]:
        """Consume ``data``; return every packet it completes, in order."""
        if self._error is not None:
            raise self._error
        buf = self._buf
        if buf:
            if len(buf) + len(data) < self._need:
                if type(buf) is bytes:
                    buf = self._buf = bytearray(buf)
                buf += data
                return []
            data = b"".join((buf, data))
            self._buf = b""
        elif type(data) is not bytes:
            data = bytes(data)
        out: list[Packet] = []
        try:
            pos = self._run(data, out)
        except MqttError as exc:
            exc.packets = out
            self._error = exc
            self._buf = b""
            raise
        if pos < len(data):
            self._buf = data[pos:]
        return out

    def _ref(self, v5: str, v311: str) -> str:
        return v5 if self.version == MQTT_5 else v311

    def _run(self, data: bytes, out: list[Packet]) -> int:
        n = len(data)
        pos = 0
        self._need = 0
        while pos < n:
            b1 = data[pos]
            ptype = b1 >> 4
            if not self._connected and ptype != 1:
                raise ProtocolError(
                    0x82, f"[MQTT-3.1.0-1] first packet must be CONNECT, got {_NAMES[ptype]}"
                )
            if pos + 1 >= n:
                return pos
            rl = data[pos + 1]
            s = pos + 2
            if rl >= 0x80:
                if s < n and 0 < data[s] < 0x80:  # two bytes: up to 16 KiB
                    rl = (rl & 0x7F) | (data[s] << 7)
                    s += 1
                else:
                    rl, s = self._long_length(data, pos, n)
                    if s < 0:
                        return pos
            end = s + rl
            if end - pos > self.max_packet_size:
                raise MalformedPacket(
                    0x95,
                    f"{_NAMES[ptype]} of {end - pos} bytes is over the maximum packet size "
                    f"({self.max_packet_size})",
                )
            if end > n:
                self._need = end - pos
                return pos
            if ptype == 3:
                if (b1 == 0x30 or b1 == 0x32) and rl >= 2 and self.version != MQTT_5:
                    # 3.1.1 QoS 0/1, no DUP or RETAIN, a topic seen before (so checked): the
                    # hot path, inline; anything else (or anything wrong) goes to ``_publish``
                    i = s + 2 + ((data[s] << 8) | data[s + 1])
                    if i + (b1 & 2) <= end:
                        topic = _TOPICS.get(data[s + 2 : i])
                        if topic is not None:
                            if b1 == 0x30:
                                out.append(
                                    Publish(topic, data[i:end], 0, False, False, None, _NO_PROPS)
                                )
                                pos = end
                                continue
                            pid = (data[i] << 8) | data[i + 1]
                            if pid:
                                out.append(
                                    Publish(
                                        topic, data[i + 2 : end], 1, False, False, pid, _NO_PROPS
                                    )
                                )
                                pos = end
                                continue
                out.append(self._publish(b1, data, s, end))
            elif b1 == 0x40 and rl == 2 and (data[s] or data[s + 1]):
                # PUBACK, success, no properties: the QoS 1 hot path (``_ack`` for the rest)
                out.append(PubAck((data[s] << 8) | data[s + 1], 0, _NO_PROPS))
            else:
                out.append(self._other(ptype, b1, data, s, end))
            pos = end
        return pos

    def _long_length(self, data: bytes, pos: int, n: int) -> tuple[int, int]:
        """Remaining Length over one byte: (value, offset after it), or (0, -1) if cut."""
        value = 0
        for k in range(4):
            i = pos + 1 + k
            if i >= n:
                return 0, -1
            b = data[i]
            value |= (b & 0x7F) << (7 * k)
            if b < 0x80:
                if b == 0:
                    raise MalformedPacket(
                        0x81, "[MQTT-1.5.5-1] remaining length not in its shortest form"
                    )
                return value, i + 1
        raise MalformedPacket(0x81, "remaining length longer than 4 bytes")

    def _publish(self, b1: int, data: bytes, s: int, end: int) -> Publish:
        qos = (b1 >> 1) & 3
        if qos == 3:
            raise MalformedPacket(0x81, "[MQTT-3.3.1-4] PUBLISH with QoS 3")
        if not qos and b1 & 8:
            raise MalformedPacket(0x81, "[MQTT-3.3.1-2] DUP set on a QoS 0 PUBLISH")
        if s + 2 > end:
            raise MalformedPacket(0x81, "PUBLISH too short for its topic name")
        i = s + 2 + ((data[s] << 8) | data[s + 1])
        if i > end:
            raise MalformedPacket(0x81, "PUBLISH topic name runs past the end of the packet")
        raw = data[s + 2 : i]
        topic = _TOPICS.get(raw)
        if topic is None:
            topic = _topic(raw)
        pid = None
        if qos:
            if i + 2 > end:
                raise MalformedPacket(0x81, "PUBLISH too short for its packet identifier")
            pid = (data[i] << 8) | data[i + 1]
            if not pid:
                raise ProtocolError(
                    0x82, self._ref("[MQTT-2.2.1-3]", "[MQTT-2.3.1-1]") + " packet identifier 0"
                )
            i += 2
        if self.version == MQTT_5:
            if i < end and data[i] == 0:
                props: Properties = _NO_PROPS
                i += 1
            else:
                props, i = decode_properties(data, i, end, 3)
                if self._server and "subscription_identifier" in props:
                    raise ProtocolError(
                        0x82, "[MQTT-3.3.4-6] a client PUBLISH carries a subscription identifier"
                    )
            if not topic and "topic_alias" not in props:
                raise ProtocolError(0x82, "empty topic name without a topic alias (spec 3.3.2.1)")
        else:
            props = _NO_PROPS
            if not topic:
                raise ProtocolError(0x90, "[MQTT-4.7.3-1] empty topic name")
        return Publish(topic, data[i:end], qos, bool(b1 & 1), bool(b1 & 8), pid, props)

    def _other(self, ptype: int, b1: int, data: bytes, s: int, end: int) -> Packet:
        flags = b1 & 0x0F
        if flags != (2 if ptype in (6, 8, 10) else 0):
            raise MalformedPacket(
                0x81,
                self._ref("[MQTT-2.1.3-1]", "[MQTT-2.2.2-1]")
                + f" reserved flags 0x{flags:X} of {_NAMES[ptype]} are wrong",
            )
        if ptype == 0 or (ptype == 15 and self.version != MQTT_5):
            raise MalformedPacket(0x81, f"reserved packet type {ptype}")
        if self._server:
            if ptype in _FROM_SERVER:
                raise ProtocolError(0x82, f"a client sent {_NAMES[ptype]}, a server's packet")
            if ptype == 1:
                if self._connected:
                    raise ProtocolError(0x82, "[MQTT-3.1.0-2] second CONNECT on a connection")
                self._connected = True
        elif ptype in _FROM_CLIENT:
            raise ProtocolError(0x82, f"a server sent {_NAMES[ptype]}, a client's packet")
        return _DECODERS[ptype](self, data, s, end)

    def _packet_id(self, data: bytes, s: int, end: int, name: str) -> int:
        if s + 2 > end:
            raise MalformedPacket(0x81, f"{name} too short for its packet identifier")
        pid = (data[s] << 8) | data[s + 1]
        if not pid:
            ref = self._ref("[MQTT-2.2.1-3]", "[MQTT-2.3.1-1]")
            raise ProtocolError(0x82, f"{ref} {name} with packet identifier 0")
        return pid

    def _done(self, i: int, end: int, name: str) -> None:
        if i != end:
            raise MalformedPacket(0x81, f"{end - i} unexpected bytes at the end of {name}")

    def _connect(self, data: bytes, s: int, end: int) -> Connect:
        name, i = read_string(data, s, end, "protocol name")
        if i + 4 > end:
            raise MalformedPacket(0x81, "CONNECT too short for its variable header")
        level = data[i]
        if (name, level) not in _PROTOCOLS:
            if name not in ("MQTT", "MQIsdp"):
                raise ProtocolError(0x84, f"[MQTT-3.1.2-1] unknown protocol name {name[:40]!r}")
            raise ProtocolError(0x84, f"[MQTT-3.1.2-2] unsupported protocol level {level}")
        v5 = level == MQTT_5
        self.version = MQTT_5 if v5 else MQTT_311
        flags = data[i + 1]
        keepalive = (data[i + 2] << 8) | data[i + 3]
        i += 4
        if flags & 1:
            raise MalformedPacket(0x81, "[MQTT-3.1.2-3] CONNECT reserved flag is not 0")
        will_qos = (flags >> 3) & 3
        if flags & 4:
            if will_qos == 3:
                ref = self._ref("[MQTT-3.1.2-12]", "[MQTT-3.1.2-14]")
                raise MalformedPacket(0x81, f"{ref} will QoS 3")
        elif will_qos:
            ref = self._ref("[MQTT-3.1.2-11]", "[MQTT-3.1.2-13]")
            raise MalformedPacket(0x81, f"{ref} will QoS {will_qos} without a will")
        elif flags & 0x20:
            ref = self._ref("[MQTT-3.1.2-13]", "[MQTT-3.1.2-15]")
            raise MalformedPacket(0x81, f"{ref} will retain set without a will")
        if not v5 and flags & 0x40 and not flags & 0x80:
            raise MalformedPacket(0x81, "[MQTT-3.1.2-22] password without a user name")
        props: Properties = {}
        if v5:
            props, i = decode_properties(data, i, end, 1)
            if "authentication_data" in props and "authentication_method" not in props:
                raise ProtocolError(
                    0x82, "authentication data without an authentication method (spec 3.1.2.11.10)"
                )
        start = i
        client_id, i = read_string(data, i, end, "client identifier")
        if i - start - 2 > self.max_client_id:
            raise ProtocolError(
                0x85,
                f"client identifier of {i - start - 2} bytes is over {self.max_client_id}",
            )
        if not client_id and not v5 and not flags & 2:
            raise ProtocolError(
                0x85, "[MQTT-3.1.3-8] empty client identifier without clean session"
            )
        will = None
        if flags & 4:
            wprops: Properties = {}
            if v5:
                wprops, i = decode_properties(data, i, end, WILL)
            wtopic, i = read_string(data, i, end, "will topic")
            validate_topic_name(wtopic)
            wpayload, i = read_binary(data, i, end, "will payload")
            will = Will(wtopic, wpayload, will_qos, bool(flags & 0x20), wprops)
        username = password = None
        if flags & 0x80:
            username, i = read_string(data, i, end, "user name")
        if flags & 0x40:
            password, i = read_binary(data, i, end, "password")
        self._done(i, end, "CONNECT")
        return Connect(
            client_id, level, bool(flags & 2), keepalive, username, password, will, props, name
        )

    def _connack(self, data: bytes, s: int, end: int) -> ConnAck:
        if s + 2 > end:
            raise MalformedPacket(0x81, "CONNACK shorter than 2 bytes")
        ack, code = data[s], data[s + 1]
        if ack & 0xFE:
            raise MalformedPacket(0x81, "[MQTT-3.2.2-1] CONNACK reserved flags are not 0")
        props: Properties = {}
        if self.version == MQTT_5:
            _check_code(2, code)
            props, i = decode_properties(data, s + 2, end, 2)
            self._done(i, end, "CONNACK")
        else:
            self._done(s + 2, end, "CONNACK")
            if code not in _CONNACK_FROM_311:
                raise ProtocolError(0x82, f"CONNACK return code {code} is not defined in 3.1.1")
            code = _CONNACK_FROM_311[code]
        if code and ack:
            ref = self._ref("[MQTT-3.2.2-6]", "[MQTT-3.2.2-4]")
            raise ProtocolError(0x82, f"{ref} session present with a failure reason code")
        return ConnAck(code, bool(ack), props)

    def _ack(self, ptype: int, data: bytes, s: int, end: int) -> PubAck | PubRec | PubRel | PubComp:
        name = _NAMES[ptype]
        pid = self._packet_id(data, s, end, name)
        code = 0
        props: Properties = {}
        i = s + 2
        if self.version == MQTT_5 and end > i:
            code = data[i]
            _check_code(ptype, code)
            i += 1
            if end > i:
                props, i = decode_properties(data, i, end, ptype)
        self._done(i, end, name)
        return _ACK_TYPES[ptype](pid, code, props)

    def _subscribe(self, data: bytes, s: int, end: int) -> Subscribe:
        pid = self._packet_id(data, s, end, "SUBSCRIBE")
        i = s + 2
        v5 = self.version == MQTT_5
        props: Properties = {}
        if v5:
            props, i = decode_properties(data, i, end, 8)
        subs = []
        while i < end:
            f, i = read_string(data, i, end, "topic filter")
            if i >= end:
                raise MalformedPacket(0x81, f"no subscription options after filter {f[:200]!r}")
            o = data[i]
            i += 1
            qos = o & 3
            if not v5:
                if o & 0xFC or qos == 3:
                    raise MalformedPacket(
                        0x81, f"[MQTT-3.8.3-4] bad requested QoS byte 0x{o:02X} for {f[:200]!r}"
                    )
                subs.append(SubscriptionRequest(f, qos))
                continue
            if o & 0xC0:
                raise MalformedPacket(
                    0x81, f"[MQTT-3.8.3-5] reserved subscription option bits set for {f[:200]!r}"
                )
            if qos == 3:
                raise ProtocolError(0x82, f"maximum QoS 3 for {f[:200]!r} (spec 3.8.3.1)")
            rh = o >> 4
            if rh == 3:
                raise ProtocolError(0x82, f"retain handling 3 for {f[:200]!r} (spec 3.8.3.1)")
            if o & 4 and f.startswith("$share/"):
                raise ProtocolError(
                    0x82, f"[MQTT-3.8.3-4] no local on shared subscription {f[:200]!r}"
                )
            subs.append(SubscriptionRequest(f, qos, bool(o & 4), bool(o & 8), rh))
        if not subs:
            ref = self._ref("[MQTT-3.8.3-2]", "[MQTT-3.8.3-3]")
            raise ProtocolError(0x82, f"{ref} SUBSCRIBE without a topic filter")
        return Subscribe(pid, subs, props)

    def _suback(self, data: bytes, s: int, end: int) -> SubAck:
        pid = self._packet_id(data, s, end, "SUBACK")
        i = s + 2
        props: Properties = {}
        if self.version == MQTT_5:
            props, i = decode_properties(data, i, end, 9)
            allowed = _CODES[9]
        else:
            allowed = _SUBACK_311
        codes = list(data[i:end])
        if not codes:
            raise ProtocolError(0x82, "SUBACK without a return code")
        for c in codes:
            if c not in allowed:
                raise ProtocolError(0x82, f"SUBACK return code 0x{c:02X} is not defined")
        return SubAck(pid, codes, props)

    def _unsubscribe(self, data: bytes, s: int, end: int) -> Unsubscribe:
        pid = self._packet_id(data, s, end, "UNSUBSCRIBE")
        i = s + 2
        props: Properties = {}
        if self.version == MQTT_5:
            props, i = decode_properties(data, i, end, 10)
        filters = []
        while i < end:
            f, i = read_string(data, i, end, "topic filter")
            filters.append(f)
        if not filters:
            raise ProtocolError(0x82, "[MQTT-3.10.3-2] UNSUBSCRIBE without a topic filter")
        return Unsubscribe(pid, filters, props)

    def _unsuback(self, data: bytes, s: int, end: int) -> UnsubAck:
        pid = self._packet_id(data, s, end, "UNSUBACK")
        if self.version != MQTT_5:
            self._done(s + 2, end, "UNSUBACK")
            return UnsubAck(pid)
        props, i = decode_properties(data, s + 2, end, 11)
        codes = list(data[i:end])
        for c in codes:
            _check_code(11, c)
        return UnsubAck(pid, codes, props)

    def _empty(self, ptype: int, s: int, end: int) -> None:
        self._done(s, end, _NAMES[ptype])

    def _pingreq(self, data: bytes, s: int, end: int) -> PingReq:
        self._empty(12, s, end)
        return PingReq()

    def _pingresp(self, data: bytes, s: int, end: int) -> PingResp:
        self._empty(13, s, end)
        return PingResp()

    def _reason_and_props(
        self, ptype: int, data: bytes, s: int, end: int
    ) -> tuple[int, Properties]:
        """DISCONNECT and AUTH: optional reason code, then optional properties."""
        if self.version != MQTT_5 or s == end:
            self._empty(ptype, s, end)
            return 0, {}
        code = data[s]
        _check_code(ptype, code)
        props: Properties = {}
        if end > s + 1:
            props, i = decode_properties(data, s + 1, end, ptype)
            self._done(i, end, _NAMES[ptype])
        return code, props

    def _disconnect(self, data: bytes, s: int, end: int) -> Disconnect:
        return Disconnect(*self._reason_and_props(14, data, s, end))

    def _auth(self, data: bytes, s: int, end: int) -> Auth:
        return Auth(*self._reason_and_props(15, data, s, end))


# Outside the class body, so that mypyc can compile the class (methods by packet type).
_DECODERS: dict[int, Callable[[MqttParser, bytes, int, int], Packet]] = {
    1: MqttParser._connect,
    2: MqttParser._connack,
    4: lambda self, d, s, e: self._ack(4, d, s, e),
    5: lambda self, d, s, e: self._ack(5, d, s, e),
    6: lambda self, d, s, e: self._ack(6, d, s, e),
    7: lambda self, d, s, e: self._ack(7, d, s, e),
    8: MqttParser._subscribe,
    9: MqttParser._suback,
    10: MqttParser._unsubscribe,
    11: MqttParser._unsuback,
    12: MqttParser._pingreq,
    13: MqttParser._pingresp,
    14: MqttParser._disconnect,
    15: MqttParser._auth,
}
