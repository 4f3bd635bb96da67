"""MQTT 3.1.1 and 5 sessions for the fuzzers, drawn by hypothesis and encoded by
wire/mqtt.py: CONNECT variants with the fuzz user's login, wills and v5 properties; PUBLISH
at every QoS with properties, topic aliases and QoS 2 releases; SUBSCRIBE with wildcards,
shared subscriptions and v5 options; acks for unknown ids, UNSUBSCRIBE, PINGREQ, DISCONNECT,
AUTH.  ``relength`` rewrites a packet's remaining length (huge, zero, five varint bytes)."""

from __future__ import annotations

import asyncio
import uuid
from random import Random

from hypothesis import strategies as st

from fuzz.fuzzkit import PASSWORD, USER, draw
from fuzz.mutate import HUGE
from waystation.wire.mqtt import (
    MQTT_5,
    Auth,
    Connect,
    Disconnect,
    MqttParser,
    PingReq,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    Subscribe,
    SubscriptionRequest,
    Unsubscribe,
    Will,
    encode,
)
from waystation.wire.mqtt_properties import encode_vbi

_text = st.text(st.characters(codec="utf-8", blacklist_characters="\x00"), max_size=12)
_topic = st.sampled_from(["fz/a", "fz/b/c", "fz/", "$SYS/x", "fz/" + "d/" * 40]) | _text.map(
    lambda t: "fz/" + t
)
_filter = st.sampled_from(["fz/#", "fz/+", "fz/+/c", "#", "+", "$share/g/fz/a", "$share//x",
                           "fz/#/x", "fz/a+", "$SYS/#"]) | _topic  # fmt: skip
_pid = st.integers(1, 65535) | st.sampled_from([1, 2, 3])
_u32 = st.integers(0, 2**32 - 1)
_users = st.lists(st.tuples(_text, _text), max_size=3)


def _props(**fields: st.SearchStrategy) -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries({}, optional={"user_property": _users, **fields})


_pub_props = _props(
    payload_format_indicator=st.integers(0, 1),
    message_expiry_interval=_u32,
    content_type=_text,
    response_topic=_topic,
    correlation_data=st.binary(max_size=16),
    topic_alias=st.integers(1, 12),
)


@st.composite
def connect(draw_: st.DrawFn, v: int) -> bytes:
    v5 = v == MQTT_5
    will = None
    if draw_(st.booleans()):
        will = Will(
            draw_(_topic),
            draw_(st.binary(max_size=40)),
            draw_(st.integers(0, 2)),
            draw_(st.booleans()),
            draw_(_props(will_delay_interval=_u32, content_type=_text)) if v5 else {},
        )
    props = {}
    if v5:
        props = draw_(_props(
            session_expiry_interval=_u32,
            receive_maximum=st.integers(1, 20),
            maximum_packet_size=st.integers(1, 2**32 - 1),
            topic_alias_maximum=st.integers(0, 20),
            request_response_information=st.integers(0, 1),
            request_problem_information=st.integers(0, 1),
        ))  # fmt: skip
    client_id = draw_(st.just("") | _text | st.uuids().map(str))
    clean = draw_(st.booleans()) or not client_id
    return encode(
        Connect(
            client_id, v, clean, draw_(st.integers(0, 65535)), USER, PASSWORD.encode(), will, props
        ),  # fmt: skip
        v,
    )


@st.composite
def _publish(draw_: st.DrawFn, v: int) -> list[bytes]:
    qos = draw_(st.integers(0, 2))
    props = draw_(_pub_props) if v == MQTT_5 else {}
    topic = "" if "topic_alias" in props and draw_(st.booleans()) else draw_(_topic)
    pid = draw_(_pid) if qos else None
    payload = draw_(st.binary(max_size=200) | st.integers(0, 20_000).map(lambda n: b"p" * n))
    out = [encode(Publish(topic, payload, qos, draw_(st.booleans()), draw_(st.booleans()) and
                          bool(qos), pid, props), v)]  # fmt: skip
    if qos == 2 and pid is not None and draw_(st.booleans()):
        out.append(encode(PubRel(pid), v))
    return out


def packet(v: int) -> st.SearchStrategy[list[bytes]]:
    v5 = v == MQTT_5
    if v5:
        sub = st.builds(SubscriptionRequest, _filter, st.integers(0, 2), st.booleans(),
                        st.booleans(), st.integers(0, 2))  # fmt: skip
        sub_props = _props(subscription_identifier=st.integers(1, 268_435_455))
        extra = st.builds(
            Disconnect,
            st.sampled_from([0, 4, 0x80, 0x8E]),
            _props(session_expiry_interval=_u32, reason_string=_text),
        ) | st.builds(
            Auth,
            st.sampled_from([0, 0x18, 0x19]),
            _props(authentication_method=_text, authentication_data=st.binary(max_size=8)),
        )
    else:
        sub = st.builds(SubscriptionRequest, _filter, st.integers(0, 2))
        sub_props = st.just({})
        extra = st.just(Disconnect())
    acks = st.one_of(*(st.builds(cls, _pid) for cls in (PubAck, PubRec, PubRel, PubComp)))
    single = (
        st.builds(Subscribe, _pid, st.lists(sub, min_size=1, max_size=4), sub_props)
        | st.builds(
            Unsubscribe,
            _pid,
            st.lists(_filter, min_size=1, max_size=3),
            _props() if v5 else st.just({}),
        )  # fmt: skip
        | acks
        | st.just(PingReq())
        | extra
    )
    return _publish(v) | _publish(v) | single.map(lambda p: [encode(p, v)])


_REMAINING_OK = 268_435_455


def relength(packet: bytes, rng: Random) -> bytes | None:
    """The remaining length rewritten: another value (huge ones included), or a varint of
    five bytes (never valid)."""
    if len(packet) < 2:
        return None
    end = 1
    while end < min(len(packet), 5) and packet[end] & 0x80:
        end += 1
    value = rng.choice(HUGE + (_REMAINING_OK, len(packet) - end, len(packet)))
    head = b"\xff\xff\xff\xff\x7f" if rng.random() < 0.1 else encode_vbi(min(value, _REMAINING_OK))
    return packet[:1] + head + packet[end + 1 :]


def sessions(v: int, rng: Random, n: int, seed: int) -> list[list[bytes]]:
    """``n`` sessions of protocol level ``v``: a drawn CONNECT and one to eight drawn packets."""
    connects, packets = draw(connect(v), 30, seed), draw(packet(v), n, seed)
    return [
        [rng.choice(connects), *(f for p in rng.sample(packets, rng.randint(1, 8)) for f in p)]
        for _ in range(n)
    ]


async def round_trip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, v: int) -> None:
    """CONNECT, SUBSCRIBE, a QoS 1 PUBLISH to itself and its PUBACK (then closed)."""
    topic = f"fz/probe/{uuid.uuid4().hex[:8]}"
    sub = Subscribe(1, [SubscriptionRequest(topic, 1)])
    packets = [Connect(f"probe-{topic[9:]}", v, True, 0, USER, PASSWORD.encode()), sub]
    writer.write(b"".join(encode(p, v) for p in packets))
    parser = MqttParser(version=v)
    got: list[object] = []
    try:
        while True:
            data = await reader.read(65536)
            assert data, f"probe: closed after {got}"
            got += parser.feed(data)
            kinds = [type(p).__name__ for p in got]
            if kinds == ["ConnAck", "SubAck"]:
                writer.write(encode(Publish(topic, b"probe", 1, packet_id=7), v))
            if "PubAck" in kinds and "Publish" in kinds:
                break
        assert getattr(got[0], "reason_code", None) == 0, got
    finally:
        writer.close()
