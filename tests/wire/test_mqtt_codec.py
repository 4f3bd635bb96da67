"""Tests for the sans-I/O MQTT codec: every packet type round-trips in 3.1.1 and 5 however
the bytes are cut, every malformed or forbidden input is refused with the right exception,
reason code and normative statement, and max_packet_size is enforced from the length alone.
"""

from __future__ import annotations

import pytest

from waystation.wire.mqtt import (
    MQTT_5,
    MQTT_311,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    MalformedPacket,
    MqttError,
    MqttParser,
    Packet,
    PingReq,
    PingResp,
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
    encode,
    validate_topic_filter,
    validate_topic_name,
)
from waystation.wire.mqtt_properties import encode_vbi, read_vbi

VERSIONS = (MQTT_311, MQTT_5)


def s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return len(raw).to_bytes(2, "big") + raw


def pkt(b1: int, body: bytes) -> bytes:
    return bytes((b1,)) + encode_vbi(len(body)) + body


def server(version: int = MQTT_5, **kw: int) -> MqttParser:
    """A server's parser after the client's CONNECT."""
    p = MqttParser(**kw)
    assert p.feed(encode(Connect("c", protocol_level=version), version))
    assert p.version == version
    return p


def feed_cut(p: MqttParser, data: bytes, cuts: list[int]) -> list[Packet]:
    out: list[Packet] = []
    prev = 0
    for c in sorted({c for c in cuts if 0 < c < len(data)}) + [len(data)]:
        out += p.feed(data[prev:c])
        prev = c
    return out


def refused(p: MqttParser, data: bytes, exc: type[MqttError], code: int, text: str = "") -> None:
    with pytest.raises(exc) as info:
        p.feed(data)
    assert info.value.reason_code == code, info.value
    assert text in info.value.message, info.value.message
    with pytest.raises(exc):  # dead from now on
        p.feed(b"")


# --- round trips -------------------------------------------------------------------------

PROPS5 = {"user_property": [("k", "v"), ("k", "v2")], "reason_string": "why"}
CLIENT_PACKETS: dict[int, list[Packet]] = {
    MQTT_311: [
        Publish("a/b", b"x", 0),
        Publish("a/b", b"\x00" * 300, 1, retain=True, dup=True, packet_id=1),
        Publish("\uffff/\u00e9", b"", 2, packet_id=65535),
        PubAck(1),
        PubRec(2),
        PubRel(3),
        PubComp(4),
        Subscribe(5, [SubscriptionRequest("a/+", 1), SubscriptionRequest("#", 2)]),
        Unsubscribe(6, ["a/+", "b"]),
        PingReq(),
        Disconnect(),
    ],
    MQTT_5: [
        Publish("a/b", b"x", 0),
        Publish(
            "a/b",
            b"y" * 20000,
            1,
            True,
            True,
            9,
            {
                "payload_format_indicator": 1,
                "message_expiry_interval": 60,
                "content_type": "text/plain",
                "response_topic": "r/t",
                "correlation_data": b"\x00\x01",
                "topic_alias": 3,
                "user_property": [("a", "1"), ("a", "2"), ("b", "")],
            },
        ),
        Publish("", b"z", 2, packet_id=2, properties={"topic_alias": 7}),
        PubAck(1),
        PubAck(1, 0x10),
        PubRec(2, 0x80, PROPS5),
        PubRel(3, 0x92),
        PubComp(4, 0, {"reason_string": "ok"}),
        Subscribe(
            5,
            [
                SubscriptionRequest("a/+", 1, True, True, 2),
                SubscriptionRequest("$share/g/x/#", 2, retain_handling=1),
            ],
            {"subscription_identifier": 268_435_455, "user_property": [("u", "p")]},
        ),
        Unsubscribe(6, ["a/+"], {"user_property": [("u", "p")]}),
        PingReq(),
        Disconnect(),
        Disconnect(4),
        Disconnect(0x8E, {"session_expiry_interval": 0, "reason_string": "bye"}),
        Auth(),
        Auth(0x18, {"authentication_method": "SCRAM", "authentication_data": b"\x01"}),
    ],
}
SERVER_PACKETS: dict[int, list[Packet]] = {
    MQTT_311: [
        ConnAck(),
        ConnAck(0, True),
        ConnAck(ReasonCode.NOT_AUTHORIZED),
        Publish("a/b", b"p", 1, packet_id=77),
        PubAck(1),
        PubRel(1),
        SubAck(5, [0, 1, 2, 0x80]),
        UnsubAck(6),
        PingResp(),
    ],
    MQTT_5: [
        ConnAck(),
        ConnAck(
            0,
            True,
            {
                "session_expiry_interval": 10,
                "receive_maximum": 100,
                "maximum_qos": 1,
                "retain_available": 0,
                "maximum_packet_size": 1 << 20,
                "assigned_client_identifier": "auto-1",
                "topic_alias_maximum": 10,
                "reason_string": "ok",
                "user_property": [("x", "y")],
                "wildcard_subscription_available": 1,
                "subscription_identifier_available": 0,
                "shared_subscription_available": 1,
                "server_keep_alive": 30,
                "response_information": "ri",
                "server_reference": "other:1883",
                "authentication_method": "m",
                "authentication_data": b"d",
            },
        ),
        ConnAck(0x9C, False, {"server_reference": "b:1883"}),
        Publish("a/b", b"p", 1, packet_id=77, properties={"subscription_identifier": [1, 99]}),
        SubAck(5, [0, 1, 2, 0x80, 0x8F, 0xA2], PROPS5),
        UnsubAck(6, [0, 0x11], PROPS5),
        PingResp(),
        Disconnect(0x8B, {"server_reference": "x"}),
    ],
}
CONNECTS = [
    Connect("c", MQTT_311),
    Connect("", MQTT_311, True, 0, "user", b"pw", Will("w/t", b"bye", 1, True)),
    Connect("old", 3, False, 10, protocol_name="MQIsdp"),
    Connect("c", MQTT_5, False, 65535, None, b"pw-only", None, {"session_expiry_interval": 1}),
    Connect(
        "c5",
        MQTT_5,
        True,
        5,
        "u",
        b"",
        Will(
            "w/t",
            b"\xff" * 10,
            2,
            False,
            {"will_delay_interval": 5, "message_expiry_interval": 3, "content_type": "c"},
        ),
        {
            "receive_maximum": 10,
            "maximum_packet_size": 1000,
            "topic_alias_maximum": 3,
            "request_response_information": 1,
            "request_problem_information": 0,
            "authentication_method": "m",
            "authentication_data": b"d",
            "user_property": [("a", "b")],
        },
    ),
]


def _cases() -> list[tuple[int, bool, Packet]]:
    out = [(v, True, p) for v in VERSIONS for p in CLIENT_PACKETS[v]]
    return out + [(v, False, p) for v in VERSIONS for p in SERVER_PACKETS[v]]


@pytest.mark.parametrize(("version", "from_client", "packet"), _cases(), ids=repr)
def test_round_trip_whole_byte_by_byte_and_cut(
    version: int, from_client: bool, packet: Packet
) -> None:
    data = encode(packet, version)
    stream = data * 3
    for cuts in ([], list(range(len(stream))), [1, 2, 3, len(data) - 1, len(data) + 2]):
        p = server(version) if from_client else MqttParser(version=version)
        assert feed_cut(p, stream, cuts) == [packet] * 3


@pytest.mark.parametrize("connect", CONNECTS, ids=repr)
def test_connect_round_trip_sets_the_version(connect: Connect) -> None:
    version = MQTT_5 if connect.protocol_level == MQTT_5 else MQTT_311
    data = encode(connect, version)
    p = MqttParser()
    assert feed_cut(p, data, list(range(len(data)))) == [connect]
    assert p.version == version


def test_311_drops_v5_only_fields() -> None:
    pub = Publish("t", b"x", 1, packet_id=1, properties={"message_expiry_interval": 5})
    assert server(MQTT_311).feed(encode(pub, MQTT_311)) == [Publish("t", b"x", 1, packet_id=1)]
    assert encode(PubAck(1, 0x80, {"reason_string": "r"}), MQTT_311) == b"\x40\x02\x00\x01"
    assert encode(Disconnect(0x8E), MQTT_311) == b"\xe0\x00"
    sub = Subscribe(1, [SubscriptionRequest("a", 1, True, True, 2)])
    assert server(MQTT_311).feed(encode(sub, MQTT_311)) == [
        Subscribe(1, [SubscriptionRequest("a", 1)])
    ]
    with pytest.raises(ValueError, match="AUTH"):
        encode(Auth(), MQTT_311)


def test_short_forms_of_v5_acks_and_disconnect() -> None:
    assert encode(PubAck(1), MQTT_5) == b"\x40\x02\x00\x01"
    assert encode(PubRel(1, 0x92), MQTT_5) == b"\x62\x03\x00\x01\x92"
    assert encode(Disconnect(), MQTT_5) == b"\xe0\x00"
    assert encode(Disconnect(4), MQTT_5) == b"\xe0\x01\x04"
    assert encode(PubAck(1), MQTT_311) == b"\x40\x02\x00\x01"
    # a reason code with empty properties (length 0) is accepted too
    assert server().feed(b"\x40\x04\x00\x01\x10\x00") == [PubAck(1, 0x10)]


@pytest.mark.parametrize(
    ("code", "rc311"),
    [(0, 0), (0x84, 1), (0x85, 2), (0x88, 3), (0x89, 3), (0x86, 4), (0x87, 5), (0x8A, 5),
     (0x80, 3), (0x97, 3), (1, 1), (5, 5)],
)  # fmt: skip
def test_connack_311_return_codes(code: int, rc311: int) -> None:
    data = encode(ConnAck(code), MQTT_311)
    assert data == bytes((0x20, 2, 0, rc311))
    back = {0: 0, 1: 0x84, 2: 0x85, 3: 0x88, 4: 0x86, 5: 0x87}[rc311]
    assert MqttParser(version=MQTT_311).feed(data) == [ConnAck(back)]


def test_suback_311_maps_failures_to_0x80() -> None:
    data = encode(SubAck(1, [0, 2, 0x8F, 0xA2]), MQTT_311)
    assert data.endswith(bytes((0, 2, 0x80, 0x80)))


def test_publish_payload_is_exact_bytes_and_utf8_edge_cases_pass() -> None:
    p = server(MQTT_5)
    payload = bytes(range(256)) * 4
    topic = "\ufeff/\uffff/\U0010ffff/a b"  # BOM kept [MQTT-1.5.4-3], U+FFFF allowed
    sent = Publish(topic, payload, 1, packet_id=1)
    assert p.feed(encode(sent, MQTT_5)) == [sent]


def test_packets_decoded_before_an_error_are_on_the_exception() -> None:
    p = server(MQTT_5)
    good = encode(Publish("a", b"1"), MQTT_5)
    with pytest.raises(MalformedPacket) as info:
        p.feed(good + good + b"\x36\x00")
    assert info.value.packets == [Publish("a", b"1")] * 2


def test_remaining_length_boundaries() -> None:
    for n, size in [(0, 1), (127, 1), (128, 2), (16383, 2), (16384, 3), (2097151, 3),
                    (2097152, 4), (268_435_455, 4)]:  # fmt: skip
        b = encode_vbi(n)
        assert len(b) == size
        assert read_vbi(b, 0, len(b)) == (n, size)
    with pytest.raises(ValueError):
        encode_vbi(268_435_456)
    big = Publish("t", b"x" * 2_100_000, 1, packet_id=1)  # a 4-byte remaining length
    assert server(MQTT_5, max_packet_size=3 << 20).feed(encode(big, MQTT_5)) == [big]


# --- max_packet_size ---------------------------------------------------------------------


def test_200_mb_announced_fails_as_soon_as_the_length_is_read() -> None:
    p = server(MQTT_5)
    header = b"\x30" + encode_vbi(200 << 20)
    for b in header[:-1]:
        assert p.feed(bytes((b,))) == []
    refused(p, header[-1:], MalformedPacket, 0x95, "maximum packet size")


def test_oversized_connect_is_refused_before_its_body() -> None:
    p = MqttParser(max_packet_size=1000)
    refused(p, b"\x10" + encode_vbi(5000), MalformedPacket, 0x95, "CONNECT of 5003 bytes")


def test_max_packet_size_counts_the_whole_packet() -> None:
    limit = 500
    at = Publish("t", b"x" * (limit - 7), 0)  # 1 + 2 (remaining length) + 3 + 1 + payload
    data = encode(at, MQTT_5)
    assert len(data) == limit
    assert server(MQTT_5, max_packet_size=limit).feed(data) == [at]
    over = encode(Publish("t", at.payload + b"x"), MQTT_5)
    p = server(MQTT_5, max_packet_size=limit)
    refused(p, over[:4], MalformedPacket, 0x95, f"{limit + 1} bytes")


def test_partial_packet_is_buffered_until_complete() -> None:
    p = server(MQTT_5)
    data = encode(Publish("t", b"x" * 100_000, 1, packet_id=1), MQTT_5)
    for i in range(0, len(data) - 1, 1000):
        assert p.feed(data[i : min(i + 1000, len(data) - 1)]) == []
        assert len(p._buf) == min(i + 1000, len(data) - 1)  # kept, not decoded
    assert p.feed(data[-1:]) == [Publish("t", b"x" * 100_000, 1, packet_id=1)]


# --- malformed and forbidden -------------------------------------------------------------

M, P = MalformedPacket, ProtocolError


def pub5(props: bytes, topic: bytes = s("t"), qos: int = 1) -> bytes:
    return pkt(0x30 | qos << 1, topic + (b"\x00\x01" if qos else b"") + props + b"pay")


BAD_AFTER_CONNECT = [
    # (version, bytes, exception, reason code, text in the message)
    (5, b"\x30\xff\xff\xff\xff\x01", M, 0x81, "longer than 4 bytes"),
    (4, b"\xc0\x80\x00", M, 0x81, "[MQTT-1.5.5-1]"),
    (5, b"\x41\x02\x00\x01", M, 0x81, "[MQTT-2.1.3-1]"),
    (4, b"\x41\x02\x00\x01", M, 0x81, "[MQTT-2.2.2-1]"),
    (5, b"\x60\x02\x00\x01", M, 0x81, "reserved flags 0x0 of PUBREL"),
    (5, pkt(0x80, b"\x00\x01" + b"\x00" + s("a") + b"\x00"), M, 0x81, "of SUBSCRIBE"),
    (4, pkt(0xA0, b"\x00\x01" + s("a")), M, 0x81, "of UNSUBSCRIBE"),
    (5, b"\xc1\x00", M, 0x81, "PINGREQ"),
    (5, b"\xc0\x01\x00", M, 0x81, "unexpected bytes at the end of PINGREQ"),
    (5, b"\x00\x00", M, 0x81, "reserved packet type 0"),
    (4, b"\xf0\x00", M, 0x81, "reserved packet type 15"),
    (4, b"\xe0\x01\x00", M, 0x81, "DISCONNECT"),
    (4, b"\x40\x03\x00\x01\x00", M, 0x81, "PUBACK"),
    (5, b"\x20\x02\x00\x00", P, 0x82, "a client sent CONNACK"),
    (5, b"\x90\x03\x00\x01\x00", P, 0x82, "a client sent SUBACK"),
    (4, b"\xd0\x00", P, 0x82, "a client sent PINGRESP"),
    (5, encode(Connect("again", protocol_level=5), 5), P, 0x82, "[MQTT-3.1.0-2]"),
    # PUBLISH fixed header and topic
    (5, pkt(0x36, s("t") + b"\x00\x01\x00"), M, 0x81, "[MQTT-3.3.1-4]"),
    (4, pkt(0x36, s("t") + b"\x00\x01"), M, 0x81, "[MQTT-3.3.1-4]"),
    (5, pkt(0x38, s("t") + b"\x00"), M, 0x81, "[MQTT-3.3.1-2]"),
    (4, pkt(0x39, s("t")), M, 0x81, "[MQTT-3.3.1-2]"),
    (4, pkt(0x30, s("a/+")), P, 0x90, "[MQTT-3.3.2-2]"),
    (5, pkt(0x30, s("a/#") + b"\x00"), P, 0x90, "[MQTT-3.3.2-2]"),
    (5, pkt(0x30, s(b"a\x00b") + b"\x00"), M, 0x81, "[MQTT-1.5.4-2]"),
    (5, pkt(0x30, s(b"a\xed\xa0\x80") + b"\x00"), M, 0x81, "[MQTT-1.5.4-1]"),  # surrogate
    (5, pkt(0x30, s(b"\xc0\xaf") + b"\x00"), M, 0x81, "[MQTT-1.5.4-1]"),  # overlong '/'
    (4, pkt(0x30, s(b"\xff")), M, 0x81, "[MQTT-1.5.4-1]"),
    (5, pkt(0x30, b"\x00\x09ab"), M, 0x81, "runs past the end"),
    (5, pkt(0x32, s("t")), M, 0x81, "packet identifier"),
    (5, pkt(0x32, s("t") + b"\x00\x00\x00"), P, 0x82, "[MQTT-2.2.1-3]"),
    (4, pkt(0x34, s("t") + b"\x00\x00"), P, 0x82, "[MQTT-2.3.1-1]"),
    (5, pkt(0x30, s("") + b"\x00"), P, 0x82, "without a topic alias"),
    (4, pkt(0x30, s("")), P, 0x90, "[MQTT-4.7.3-1]"),
    # v5 properties
    (5, pub5(b"\x03\x23\x00\x00"), P, 0x94, "topic_alias must not be 0"),
    (5, pub5(b"\x05\x11\x00\x00\x00\x01"), M, 0x81, "session_expiry_interval is not allowed"),
    (5, pub5(b"\x02\x7f\x00"), M, 0x81, "unknown property identifier 0x7F"),
    (5, pub5(b"\x0a\x02\x00\x00\x00\x01\x02\x00\x00\x00\x02"), P, 0x82, "more than once"),
    (5, pub5(b"\x02\x01\x02"), P, 0x82, "payload_format_indicator must be 0 or 1"),
    (5, pub5(b"\x02\x0b\x01"), P, 0x82, "[MQTT-3.3.4-6]"),
    (5, pub5(b"\x09\x02\x00\x00"), M, 0x81, "property length 9 runs past"),
    (5, pub5(b"\x03\x02\x00\x00"), M, 0x81, "message_expiry_interval runs past"),
    (5, pub5(b"\x05\x03\x00\x05ab"), M, 0x81, "content_type"),
    (5, pub5(b"\x06\x03\x00\x03a\x00b"), M, 0x81, "[MQTT-1.5.4-2] content_type"),
    (5, pub5(b"\x05\x0b\x80\x80\x80\x80"), M, 0x81, "longer than 4 bytes"),
    (5, pub5(b"\x06\x08\x00\x03a/#"), P, 0x82, "[MQTT-3.3.2-14]"),
    # SUBSCRIBE / UNSUBSCRIBE
    (5, pkt(0x82, b"\x00\x01\x00"), P, 0x82, "[MQTT-3.8.3-2]"),
    (4, pkt(0x82, b"\x00\x01"), P, 0x82, "[MQTT-3.8.3-3]"),
    (4, pkt(0x82, b"\x00\x01" + s("a") + b"\x03"), M, 0x81, "[MQTT-3.8.3-4]"),
    (4, pkt(0x82, b"\x00\x01" + s("a") + b"\x04"), M, 0x81, "[MQTT-3.8.3-4]"),
    (5, pkt(0x82, b"\x00\x01\x00" + s("a") + b"\x40"), M, 0x81, "[MQTT-3.8.3-5]"),
    (5, pkt(0x82, b"\x00\x01\x00" + s("a") + b"\x03"), P, 0x82, "maximum QoS 3"),
    (5, pkt(0x82, b"\x00\x01\x00" + s("a") + b"\x30"), P, 0x82, "retain handling 3"),
    (5, pkt(0x82, b"\x00\x01\x00" + s("$share/g/a") + b"\x04"), P, 0x82, "[MQTT-3.8.3-4]"),
    (5, pkt(0x82, b"\x00\x01\x00" + s("a")), M, 0x81, "no subscription options"),
    (5, pkt(0x82, b"\x00\x00\x00" + s("a") + b"\x00"), P, 0x82, "[MQTT-2.2.1-3]"),
    (5, pkt(0x82, b"\x00\x01\x02\x0b\x00" + s("a") + b"\x00"), P, 0x82, "must not be 0"),
    (5, pkt(0x82, b"\x00\x01\x04\x0b\x01\x0b\x02" + s("a") + b"\x00"), P, 0x82, "more than once"),
    (5, pkt(0xA2, b"\x00\x01\x00"), P, 0x82, "[MQTT-3.10.3-2]"),
    (4, pkt(0xA2, b"\x00\x01"), P, 0x82, "[MQTT-3.10.3-2]"),
    (5, pkt(0xA2, b"\x00\x01\x00" + s(b"\xed\xbf\xbf")), M, 0x81, "[MQTT-1.5.4-1]"),
    # acks, DISCONNECT, AUTH
    (5, b"\x40\x03\x00\x01\x05", P, 0x82, "reason code 0x05 is not defined for PUBACK"),
    (5, b"\x62\x03\x00\x01\x10", P, 0x82, "for PUBREL"),
    (5, b"\x40\x02\x00\x00", P, 0x82, "[MQTT-2.2.1-3] PUBACK"),
    (5, b"\x40\x01\x00", M, 0x81, "too short"),
    (5, b"\x40\x06\x00\x01\x00\x01\x26\x00", M, 0x81, "runs past"),
    (5, b"\xe0\x01\x05", P, 0x82, "for DISCONNECT"),
    (5, b"\xe0\x04\x00\x02\x1f\x00", M, 0x81, "reason_string: length runs past"),
    (5, b"\xf0\x01\x01", P, 0x82, "for AUTH"),
]


@pytest.mark.parametrize(("version", "data", "exc", "code", "text"), BAD_AFTER_CONNECT, ids=repr)
def test_refused_after_connect(
    version: int, data: bytes, exc: type[MqttError], code: int, text: str
) -> None:
    refused(server(version), data, exc, code, text)


def connect_bytes(
    flags: int, level: int = 5, payload: bytes = s("cid"), name: bytes = s("MQTT")
) -> bytes:
    props = b"\x00" if level == 5 else b""
    return pkt(0x10, name + bytes((level, flags)) + b"\x00\x3c" + props + payload)


BAD_CONNECT = [
    # (bytes, exception, reason code, text, parser version afterwards)
    (encode(Publish("t"), 4), P, 0x82, "[MQTT-3.1.0-1]", MQTT_311),
    (b"\xc0", P, 0x82, "[MQTT-3.1.0-1]", MQTT_311),  # refused from its first byte
    (b"\x11\x00", M, 0x81, "[MQTT-2.2.2-1]", MQTT_311),
    (connect_bytes(0x03), M, 0x81, "[MQTT-3.1.2-3]", MQTT_5),
    (connect_bytes(0x03, 4), M, 0x81, "[MQTT-3.1.2-3]", MQTT_311),
    (connect_bytes(0x1E, 5, s("c") + b"\x00" + s("w") + s("p")), M, 0x81, "[MQTT-3.1.2-12]", 5),
    (connect_bytes(0x1E, 4, s("c") + s("w") + s("p")), M, 0x81, "[MQTT-3.1.2-14]", 4),
    (connect_bytes(0x0A), M, 0x81, "[MQTT-3.1.2-11]", MQTT_5),
    (connect_bytes(0x22, 4), M, 0x81, "[MQTT-3.1.2-15]", MQTT_311),
    (connect_bytes(0x22, 5), M, 0x81, "[MQTT-3.1.2-13]", MQTT_5),
    (connect_bytes(0x12, 4), M, 0x81, "[MQTT-3.1.2-13] will QoS 2", MQTT_311),
    (connect_bytes(0x42, 4, s("c") + s("pw")), M, 0x81, "[MQTT-3.1.2-22]", MQTT_311),
    (connect_bytes(0x02, 6), P, 0x84, "[MQTT-3.1.2-2] unsupported protocol level 6", 4),
    (connect_bytes(0x02, 3), P, 0x84, "[MQTT-3.1.2-2]", MQTT_311),  # "MQTT" is not 3.1
    (connect_bytes(0x02, 4, name=s("MQTX")), P, 0x84, "[MQTT-3.1.2-1]", MQTT_311),
    (connect_bytes(0x00, 4, s("")), P, 0x85, "[MQTT-3.1.3-8]", MQTT_311),
    (connect_bytes(0x02, 5, s("x" * 300)), P, 0x85, "client identifier of 300 bytes", 5),
    (connect_bytes(0x02, 5, s(b"\xed\xa0\x80")), M, 0x81, "[MQTT-1.5.4-1]", MQTT_5),
    (connect_bytes(0x02, 4, s("c") + b"x"), M, 0x81, "unexpected bytes at the end", 4),
    (connect_bytes(0x82, 4, s("c")), M, 0x81, "user name", MQTT_311),
    (connect_bytes(0x06, 4, s("c") + s("w/+") + s("p")), P, 0x90, "[MQTT-3.3.2-2]", 4),
    (connect_bytes(0x06, 5, s("c") + b"\x02\x23\x01" + s("w") + s("p")), M, 0x81, "will", 5),
    (pkt(0x10, s("MQTT") + b"\x05\x02\x00\x3c\x02\x17\x02" + s("c")), P, 0x82, "0 or 1", 5),
    (pkt(0x10, s("MQTT") + b"\x05\x02\x00\x3c\x03\x21\x00\x00" + s("c")), P, 0x82, "be 0", 5),
    (pkt(0x10, s("MQTT") + b"\x05\x02\x00"), M, 0x81, "too short", MQTT_311),
    (
        pkt(0x10, s("MQTT") + b"\x05\x02\x00\x3c\x04\x16\x00\x01x" + s("c")),
        P,
        0x82,
        "authentication data without an authentication method",
        MQTT_5,
    ),  # fmt: skip
]


@pytest.mark.parametrize(("data", "exc", "code", "text", "version"), BAD_CONNECT, ids=repr)
def test_refused_connect(
    data: bytes, exc: type[MqttError], code: int, text: str, version: int
) -> None:
    p = MqttParser()
    refused(p, data, exc, code, text)
    assert p.version == version  # so the adapter answers in the client's version


def test_v5_allows_password_without_user_name_and_empty_client_id() -> None:
    data = connect_bytes(0x40, 5, s("") + s("secret"))
    assert MqttParser().feed(data) == [Connect("", MQTT_5, False, 60, None, b"secret")]


def test_mqtt_31_is_read_as_311() -> None:
    p = MqttParser()
    data = connect_bytes(0x02, 3, s("c"), s("MQIsdp"))
    assert p.feed(data) == [Connect("c", 3, protocol_name="MQIsdp")]
    assert p.version == MQTT_311


BAD_FROM_SERVER = [
    (5, b"\x20\x03\x02\x00\x00", M, 0x81, "[MQTT-3.2.2-1]"),
    (4, b"\x20\x02\x00\x06", P, 0x82, "not defined in 3.1.1"),
    (4, b"\x20\x02\x01\x05", P, 0x82, "[MQTT-3.2.2-4]"),
    (5, b"\x20\x03\x01\x87\x00", P, 0x82, "[MQTT-3.2.2-6]"),
    (5, b"\x20\x03\x00\x04\x00", P, 0x82, "CONNACK"),
    (5, pkt(0x20, b"\x00\x00\x02\x24\x02"), P, 0x82, "maximum_qos must be 0 or 1"),
    (5, pkt(0x20, b"\x00\x00\x02\x23\x01"), M, 0x81, "topic_alias is not allowed in CONNACK"),
    (4, b"\x90\x03\x00\x01\x03", P, 0x82, "SUBACK return code 0x03"),
    (4, b"\x90\x02\x00\x01", P, 0x82, "without a return code"),
    (5, b"\xb0\x04\x00\x01\x00\x05", P, 0x82, "UNSUBACK"),
    (4, b"\xb0\x03\x00\x01\x00", M, 0x81, "UNSUBACK"),
    (5, encode(Connect("c", protocol_level=5), 5), P, 0x82, "a server sent CONNECT"),
    (5, b"\xc0\x00", P, 0x82, "a server sent PINGREQ"),
]


@pytest.mark.parametrize(("version", "data", "exc", "code", "text"), BAD_FROM_SERVER, ids=repr)
def test_client_side_refuses(
    version: int, data: bytes, exc: type[MqttError], code: int, text: str
) -> None:
    refused(MqttParser(version=version), data, exc, code, text)


def test_dead_parser_raises_the_same_error() -> None:
    p = server(MQTT_5)
    with pytest.raises(MalformedPacket) as first:
        p.feed(b"\x36\x00")
    with pytest.raises(MalformedPacket) as again:
        p.feed(encode(PingReq(), MQTT_5))
    assert again.value is first.value


def test_encoder_refuses_what_the_parser_would() -> None:
    bad: Packet
    for bad in (
        Publish("t", qos=1),
        Publish("t", qos=3, packet_id=1),
        Publish("t", dup=True),
        PubAck(0),
        Subscribe(70000, [SubscriptionRequest("a")]),
        Subscribe(1, [SubscriptionRequest("a", retain_handling=3)]),
    ):
        with pytest.raises((ValueError, OverflowError)):
            encode(bad, MQTT_5)
    for bad in (
        Publish("a\x00b"),
        Subscribe(1, []),
        Unsubscribe(1, []),
        Connect("c", username="\ud800"),
    ):
        with pytest.raises(ValueError):
            encode(bad, MQTT_5)
    with pytest.raises(ValueError, match="session_expiry_interval"):
        encode(Publish("t", properties={"session_expiry_interval": 1}), MQTT_5)
    with pytest.raises(ValueError, match="MQTT-3.1.2-22"):
        encode(Connect("c", password=b"p"), MQTT_311)


# --- topics ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "a/b", "/", "//", "$SYS/x", "a b/\uffff", "\u00e9" * 30000])
def test_valid_topic_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize(
    ("name", "text"),
    [("", "[MQTT-4.7.3-1]"), ("a/+", "wildcard"), ("#", "wildcard"), ("a\x00", "[MQTT-4.7.3-2]"),
     ("\u00e9" * 32768, "[MQTT-4.7.3-3]")],
)  # fmt: skip
def test_invalid_topic_names(name: str, text: str) -> None:
    with pytest.raises(ProtocolError) as info:
        validate_topic_name(name)
    assert info.value.reason_code == 0x90 and text in info.value.message


@pytest.mark.parametrize(
    "f", ["#", "+", "a/#", "+/+", "/+/", "a/+/b/#", "$share/g/a/#", "$share/g/#", "$share/g//"]
)
def test_valid_topic_filters(f: str) -> None:
    validate_topic_filter(f)


@pytest.mark.parametrize(
    ("f", "text"),
    [("", "[MQTT-4.7.3-1]"), ("a#", "[MQTT-4.7.1-1]"), ("#/a", "[MQTT-4.7.1-1]"),
     ("a/b#", "[MQTT-4.7.1-1]"), ("a+", "[MQTT-4.7.1-2]"), ("+a/b", "[MQTT-4.7.1-2]"),
     ("a\x00", "[MQTT-4.7.3-2]"), ("$share//a", "[MQTT-4.8.2-1]"),
     ("$share/g+/a", "[MQTT-4.8.2-2]"), ("$share/g", "[MQTT-4.8.2-2]"),
     ("$share/g/", "[MQTT-4.8.2-2]"), ("$share/g/a/#/b", "[MQTT-4.7.1-1]")],
)  # fmt: skip
def test_invalid_topic_filters(f: str, text: str) -> None:
    with pytest.raises(ProtocolError) as info:
        validate_topic_filter(f)
    assert info.value.reason_code == 0x8F and text in info.value.message


def test_reason_code_enum_values() -> None:
    assert ReasonCode.PACKET_TOO_LARGE == 0x95
    assert ReasonCode.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED == 0xA2
    assert ReasonCode.GRANTED_QOS_0 == ReasonCode.SUCCESS == 0


@pytest.mark.parametrize("size", [0, 1, 120, 125, 126, 127, 128, 20000, 3_000_000])
@pytest.mark.parametrize("topic", ["a/b", "", "é/" * 40, "x" * 300])
def test_publish_qos0_fast_path_is_the_general_encoding(topic: str, size: int) -> None:
    from waystation.wire.mqtt_encode import publish_qos0

    payload = bytes(i % 251 for i in range(size))
    assert publish_qos0(topic, payload) == encode(Publish(topic, payload), MQTT_311)
