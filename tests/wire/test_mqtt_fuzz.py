"""Property tests of the MQTT codec (wire/mqtt.py) with hypothesis.

Properties: any packet the encoder can build decodes to an equal packet, in 3.1.1 and 5,
however the stream is cut; any bytes, after a valid CONNECT or from the first byte, cut
anywhere, only ever raise MalformedPacket or ProtocolError (and the parser then stays dead),
each feed returns promptly and the parser never buffers more than one maximal packet.

The default run is a bounded budget (seconds); ``-m fuzz`` runs the long budget.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from waystation.wire.mqtt import (
    MQTT_5,
    MQTT_311,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    MalformedPacket,
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
    SubAck,
    Subscribe,
    SubscriptionRequest,
    UnsubAck,
    Unsubscribe,
    Will,
    encode,
)

LONG = [pytest.mark.fuzz, pytest.mark.timeout(3600)]  # opt in: -m fuzz
BUDGET = pytest.mark.parametrize(
    "examples",
    [pytest.param(200, id="quick"), pytest.param(20_000, id="long", marks=LONG)],
)
FEED_SECONDS = 2.0
MAX_PACKET = 4096

_text = st.text(st.characters(codec="utf-8", blacklist_characters="\x00"), max_size=12)
_topic = st.text(
    st.characters(codec="utf-8", blacklist_characters="\x00+#"), min_size=1, max_size=12
)
_filter = st.sampled_from(["#", "+", "a/+", "a/#", "+/b/#", "$share/g/a"]) | _topic
_pid = st.integers(1, 65535)
_u16 = st.integers(0, 65535)
_u32 = st.integers(0, 2**32 - 1)
_users = st.lists(st.tuples(_text, _text), min_size=1, max_size=3)
_reason = st.text(max_size=8, alphabet="abc é")


def _props(**fields: st.SearchStrategy) -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries({}, optional={"user_property": _users, **fields})


_pub_props = _props(
    payload_format_indicator=st.integers(0, 1),
    message_expiry_interval=_u32,
    content_type=_text,
    response_topic=_topic,
    correlation_data=st.binary(max_size=8),
    topic_alias=st.integers(1, 65535),
)
_ack_props = _props(reason_string=_reason)


@st.composite
def _publish(draw: st.DrawFn, v5: bool, from_server: bool) -> Publish:
    qos = draw(st.integers(0, 2))
    props = draw(_pub_props) if v5 else {}
    if v5 and from_server and draw(st.booleans()):
        props["subscription_identifier"] = draw(st.lists(st.integers(1, 268_435_455), min_size=1))
    topic = "" if "topic_alias" in props and draw(st.booleans()) else draw(_topic)
    return Publish(
        topic,
        draw(st.binary(max_size=300)),
        qos,
        draw(st.booleans()),
        bool(qos) and draw(st.booleans()),
        draw(_pid) if qos else None,
        props,
    )


def _acks(v5: bool) -> st.SearchStrategy[Packet]:
    if not v5:
        return st.one_of(*(st.builds(cls, _pid) for cls in (PubAck, PubRec, PubRel, PubComp)))
    pub = st.sampled_from([0, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99])
    rel = st.sampled_from([0, 0x92])
    return (
        st.builds(PubAck, _pid, pub, _ack_props)
        | st.builds(PubRec, _pid, pub, _ack_props)
        | st.builds(PubRel, _pid, rel, _ack_props)
        | st.builds(PubComp, _pid, rel, _ack_props)
    )


def _client_packets(v: int) -> st.SearchStrategy[Packet]:
    v5 = v == MQTT_5
    if v5:
        sub = st.builds(
            SubscriptionRequest,
            _filter.filter(lambda f: not f.startswith("$share/")),
            st.integers(0, 2),
            st.booleans(),
            st.booleans(),
            st.integers(0, 2),
        )
        sub_props = _props(subscription_identifier=st.integers(1, 268_435_455))
        disc = st.builds(
            Disconnect,
            st.sampled_from([0, 4, 0x80, 0x81, 0x8E]),
            _props(session_expiry_interval=_u32, reason_string=_reason),
        )
        extra = disc | st.builds(
            Auth,
            st.sampled_from([0, 0x18, 0x19]),
            _props(authentication_method=_text, authentication_data=st.binary(max_size=8)),
        )
    else:
        sub = st.builds(SubscriptionRequest, _filter, st.integers(0, 2))
        sub_props = st.just({})
        extra = st.just(Disconnect())
    unsub_props = _props() if v5 else st.just({})
    return (
        _publish(v5, False)
        | _acks(v5)
        | st.builds(Subscribe, _pid, st.lists(sub, min_size=1, max_size=4), sub_props)
        | st.builds(Unsubscribe, _pid, st.lists(_filter, min_size=1, max_size=4), unsub_props)
        | st.just(PingReq())
        | extra
    )


def _server_packets(v: int) -> st.SearchStrategy[Packet]:
    v5 = v == MQTT_5
    if v5:
        connack = st.builds(
            ConnAck,
            st.sampled_from([0, 0x80, 0x84, 0x87, 0x9C]),
            st.just(False),
            _props(
                session_expiry_interval=_u32,
                receive_maximum=st.integers(1, 65535),
                maximum_qos=st.integers(0, 1),
                retain_available=st.integers(0, 1),
                maximum_packet_size=st.integers(1, 2**32 - 1),
                assigned_client_identifier=_text,
                topic_alias_maximum=_u16,
                reason_string=_reason,
                server_keep_alive=_u16,
                server_reference=_text,
            ),
        )
        codes = st.lists(st.sampled_from([0, 1, 2, 0x80, 0x8F, 0x9E]), min_size=1, max_size=4)
        suback = st.builds(SubAck, _pid, codes, _ack_props)
        unsuback = st.builds(
            UnsubAck, _pid, st.lists(st.sampled_from([0, 0x11, 0x80]), max_size=3), _ack_props
        )
    else:
        connack = st.builds(ConnAck, st.sampled_from([0, 0x84, 0x85, 0x88, 0x86, 0x87]))
        codes = st.lists(st.sampled_from([0, 1, 2, 0x80]), min_size=1, max_size=4)
        suback = st.builds(SubAck, _pid, codes)
        unsuback = st.builds(UnsubAck, _pid)
    return connack | _publish(v5, True) | _acks(v5) | suback | unsuback | st.just(PingResp())


@st.composite
def _connect(draw: st.DrawFn, v: int) -> Connect:
    v5 = v == MQTT_5
    will = None
    if draw(st.booleans()):
        will = Will(
            draw(_topic),
            draw(st.binary(max_size=20)),
            draw(st.integers(0, 2)),
            draw(st.booleans()),
            draw(_props(will_delay_interval=_u32, content_type=_text)) if v5 else {},
        )
    username = draw(st.none() | _text)
    password = draw(st.none() | st.binary(max_size=10)) if v5 or username is not None else None
    client_id = draw(_text)
    clean = draw(st.booleans()) or (not v5 and not client_id)
    props = (
        draw(_props(session_expiry_interval=_u32, receive_maximum=st.integers(1, 9))) if v5 else {}
    )
    return Connect(client_id, v, clean, draw(_u16), username, password, will, props)


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    cuts = sorted(c for c in cuts if c <= len(data))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def _timed_feed(p: MqttParser, chunk: bytes) -> list[Packet]:
    t0 = time.monotonic()
    try:
        return p.feed(chunk)
    finally:
        assert time.monotonic() - t0 < FEED_SECONDS
        assert len(p._buf) < MAX_PACKET  # white-box: never more than one packet held


@BUDGET
@pytest.mark.parametrize("version", [MQTT_311, MQTT_5])
def test_client_packets_round_trip_cut_anywhere(version: int, examples: int) -> None:
    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
    @given(
        connect=_connect(version),
        packets=st.lists(_client_packets(version), min_size=1, max_size=6),
        cuts=st.lists(st.integers(0, 3000), max_size=12),
    )
    def run(connect: Connect, packets: list[Packet], cuts: list[int]) -> None:
        stream = b"".join(encode(p, version) for p in [connect, *packets])
        p = MqttParser(MAX_PACKET)
        got: list[Packet] = []
        for chunk in _cut(stream, cuts):
            got += _timed_feed(p, chunk)
        assert got == [connect, *packets]
        assert not p._buf

    run()


@BUDGET
@pytest.mark.parametrize("version", [MQTT_311, MQTT_5])
def test_server_packets_round_trip_cut_anywhere(version: int, examples: int) -> None:
    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
    @given(
        packets=st.lists(_server_packets(version), min_size=1, max_size=6),
        cuts=st.lists(st.integers(0, 3000), max_size=12),
    )
    def run(packets: list[Packet], cuts: list[int]) -> None:
        stream = b"".join(encode(p, version) for p in packets)
        p = MqttParser(MAX_PACKET, version=version)
        got: list[Packet] = []
        for chunk in _cut(stream, cuts):
            got += _timed_feed(p, chunk)
        assert got == packets

    run()


_pieces = st.sampled_from(
    [b"\x10", b"\x30", b"\x32", b"\x34", b"\x36", b"\x38", b"\x62", b"\x82", b"\xa2", b"\xc0",
     b"\xe0", b"\xf0", b"\x00", b"\x01", b"\x02", b"\x7f", b"\x80", b"\xff", b"\x00\x04MQTT",
     b"\x04", b"\x05", b"\x26", b"\x0b", b"\x23", b"\xed\xa0\x80", b"+", b"#", b"/", b"$share/"]
)  # fmt: skip
_hostile = (
    st.binary(max_size=600)
    | st.lists(_pieces, max_size=120).map(b"".join)
    | st.tuples(_pieces, st.integers(1, 3000)).map(lambda t: t[0] * t[1])
)


@BUDGET
def test_hostile_bytes_only_raise_codec_errors(examples: int) -> None:
    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
    @given(
        data=_hostile,
        prefix=st.sampled_from([b"", encode(Connect("c"), 4), encode(Connect("c", 5), 5)]),
        client_side=st.sampled_from([None, MQTT_311, MQTT_5]),
        cuts=st.lists(st.integers(0, 4000), max_size=10),
    )
    def run(data: bytes, prefix: bytes, client_side: int | None, cuts: list[int]) -> None:
        p = MqttParser(MAX_PACKET, version=client_side)
        try:
            for chunk in _cut(prefix + data, cuts):
                for packet in _timed_feed(p, chunk):
                    encode(packet, p.version)  # whatever decodes can be sent on
        except (MalformedPacket, ProtocolError) as exc:
            assert exc.message and 0x80 <= exc.reason_code <= 0xA2
            with pytest.raises(type(exc)):
                p.feed(b"\xc0\x00")

    run()
