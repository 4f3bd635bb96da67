"""The per-message fast paths give what the general paths give: the codec's inline PUBLISH and
PUBACK decoding, the inline QoS 0/1 encodings, PUBACKs settled in a batch with one dispatch,
and the shared empty state of an idle connection, which is never written to."""

from __future__ import annotations

from mqtt_inproc_kit import Client, in_engine, settle

from waystation.gateway.mqtt.deliveries import publish_qos1
from waystation.gateway.mqtt.inflight import NO_ENTRIES
from waystation.wire.mqtt import (
    MQTT_5,
    MQTT_311,
    Connect,
    MalformedPacket,
    MqttParser,
    ProtocolError,
    PubAck,
    Publish,
    SubAck,
    Subscribe,
    SubscriptionRequest,
    encode,
)


def _parser(version: int = MQTT_311) -> MqttParser:
    p = MqttParser()
    p.feed(encode(Connect("c", protocol_level=version), version))
    return p


def test_inline_publish_decoding_equals_the_general_one() -> None:
    """The first PUBLISH to a topic takes the general path (and caches the topic), the
    repeats the inline one: same packets, QoS 0 and 1, whatever the payload."""
    for qos in (0, 1):
        for payload in (b"", b"x", bytes(200), bytes(20000)):
            pkt = Publish("a/b", payload, qos, packet_id=7 if qos else None)
            p = _parser()
            first, second = p.feed(encode(pkt, MQTT_311) * 2)
            assert first == second == pkt


def test_inline_paths_keep_the_rules() -> None:
    """Packet id 0, a topic running past the packet, and a cut packet still fail or wait
    exactly as the general path does, with the topic already cached."""
    good = encode(Publish("t/x", b"p", 1, packet_id=1), MQTT_311)
    p = _parser()
    p.feed(good)
    zero = bytearray(good)
    zero[-3:-1] = b"\x00\x00"  # packet id 0 [MQTT-2.3.1-1]
    try:
        p.feed(bytes(zero))
        raise AssertionError("packet id 0 accepted")
    except ProtocolError as e:
        assert e.reason_code == 0x82
    p = _parser()
    p.feed(good)
    long_topic = bytearray(good)
    long_topic[3] = 200  # topic length beyond the packet
    try:
        p.feed(bytes(long_topic))
        raise AssertionError("topic past the end accepted")
    except MalformedPacket:
        pass
    p = _parser()
    assert p.feed(good[:-1]) == []  # cut: waits for the rest
    assert p.feed(good[-1:]) == [Publish("t/x", b"p", 1, packet_id=1)]
    try:
        _parser().feed(b"\x40\x02\x00\x00")  # PUBACK with packet id 0
        raise AssertionError("PUBACK with packet id 0 accepted")
    except ProtocolError:
        pass


def test_inline_puback_decoding_and_v5_reason_codes() -> None:
    p = _parser(MQTT_5)
    acks = p.feed(b"\x40\x02\x01\x02" + encode(PubAck(9, 0x10), MQTT_5))
    assert acks == [PubAck(0x0102), PubAck(9, 0x10)]


def test_inline_qos1_encoding_equals_the_general_one() -> None:
    for topic, payload, pid in (
        ("a/b", b"x" * 100, 1),
        ("ü/x", b"", 65535),
        ("t" * 300, bytes(20000), 9),
    ):
        assert publish_qos1(topic, payload, pid) == encode(
            Publish(topic, payload, 1, packet_id=pid), MQTT_311
        )


def test_pubacks_in_one_read_free_the_window_for_the_next_deliveries(run):
    """Several PUBACKs in one read: the consumer is dispatched once, after the batch, and
    the next messages go out at once (the window of 2 is never exceeded)."""

    async def go(engine):
        pub, sub = Client(engine), Client(engine, max_inflight=2)
        pub.connect("pub")
        sub.connect("sub")
        sub.send(Subscribe(1, [SubscriptionRequest("w/#", 1)]))
        await settle()
        assert isinstance(sub.recv()[0], SubAck)
        pub.send(*(Publish("w/1", b"%d" % i, 1, packet_id=i + 1) for i in range(5)))
        await settle()
        assert pub.recv() == [PubAck(i + 1) for i in range(5)]
        got = sub.recv()
        assert [p.payload for p in got] == [b"0", b"1"]
        sub.send(*(PubAck(p.packet_id) for p in got))
        await settle()
        got = sub.recv()
        assert [p.payload for p in got] == [b"2", b"3"]
        sub.send(PubAck(got[0].packet_id), PubAck(got[1].packet_id), PubAck(got[0].packet_id))
        await settle()
        [last] = sub.recv()
        assert last.payload == b"4" and last.qos == 1
        assert len(sub.server.outbound.entries) == 1

    in_engine(run, go)


def test_idle_connection_shares_its_empty_state_and_never_writes_to_it(run):
    async def go(engine):
        c = Client(engine, topic_alias_maximum=5)
        c.connect("idle")
        s = c.server
        assert s._addresses is NO_ENTRIES and s.in_aliases is NO_ENTRIES
        assert s.outbound.resend is NO_ENTRIES
        pub = Client(engine, MQTT_5, topic_alias_maximum=5)
        pub.connect("talker")
        pub.send(Publish("a/b", b"x", 0, properties={"topic_alias": 1}))
        await settle()
        assert pub.server._addresses is not NO_ENTRIES and pub.server.in_aliases == {1: "a/b"}
        assert NO_ENTRIES == {}

    in_engine(run, go)
