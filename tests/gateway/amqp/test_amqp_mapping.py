"""The AMQP message mapping table, section by section, against proton's own encoder."""

from __future__ import annotations

import uuid

import pytest
from proton import Message as PMessage
from proton import int32, symbol, ulong

from waystation.core.message import Float32, Int32, Timestamp
from waystation.gateway.amqp.codec import DecodeError, Symbol, decode_all, encode
from waystation.gateway.amqp.mapping import (
    BODY,
    SECTIONS_TYPE,
    encode_message,
    message_from_transfer,
)

NOW = 1_700_000_000_000


def _in(p: PMessage, address: str = "q"):
    return message_from_transfer(bytes(p.encode()), 1, address, NOW)


def _out(m) -> PMessage:
    p = PMessage()
    p.decode(encode_message(m, 1, NOW))
    return p


def _body_sections(payload: bytes) -> bytes:
    """The bytes from the first body section on."""
    pos = 0
    while pos < len(payload):
        code = payload[pos + 2]
        from waystation.gateway.amqp.codec import decode_value

        _, end = decode_value(payload, pos + 3)
        if code >= 0x75:
            return payload[pos:]
        pos = end
    return b""


def test_data_section_is_the_bytes_with_no_marker():
    m, _ = _in(PMessage(body=b"\x00\x01raw", inferred=True))
    assert m.body == b"\x00\x01raw"
    assert m.annotation(BODY) is None
    assert _out(m).body == b"\x00\x01raw"


def test_amqp_value_string_is_utf8_text_and_goes_back_as_a_string():
    m, _ = _in(PMessage(body="héllo"))
    assert m.body == "héllo".encode()
    assert m.annotation(BODY) == "s"
    assert _out(m).body == "héllo"


def test_amqp_value_binary_is_the_bytes():
    m, _ = _in(PMessage(body=b"bin"))
    assert m.body == b"bin" and m.annotation(BODY) == "b"
    assert bytes(_out(m).body) == b"bin"


@pytest.mark.parametrize(
    "body",
    [{"k": [1, 2, "x"]}, [1, "two", 3.0], 42, uuid.UUID(int=7)],
)
def test_other_bodies_are_their_amqp_encoding_with_a_content_type(body):
    p = PMessage(body=body)
    payload = bytes(p.encode())
    m, _ = message_from_transfer(payload, 1, "q", NOW)
    assert m.body == _body_sections(payload)  # what other protocols see: the AMQP encoding
    assert m.content_type == SECTIONS_TYPE
    back = _out(m)
    assert back.body == body
    assert back.content_type in (None, "None")  # the made-up one is not sent to AMQP
    assert _body_sections(encode_message(m, 1, NOW)) == _body_sections(payload)


def test_no_body_section_is_an_empty_body_and_stays_absent():
    m, _ = _in(PMessage(body=None))
    assert m.body == b"" and m.annotation(BODY) == "n"
    assert _body_sections(encode_message(m, 1, NOW)) == b""


def test_a_non_compact_body_is_kept_byte_for_byte():
    section = b"\x00\x53\x75\xb0\x00\x00\x00\x03abc"  # vbin32 where vbin8 would do
    m, _ = message_from_transfer(section, 1, "q", NOW)
    assert m.body == b"abc"
    assert _body_sections(encode_message(m, 1, NOW)) == section


def test_several_data_sections_keep_their_content_type_when_given():
    payload = (
        b"\x00\x53\x73"
        + encode([None, None, None, None, None, None, Symbol("app/x")])
        + b"\x00\x53\x75\xa0\x01a\x00\x53\x75\xa0\x01b"
    )
    m, _ = message_from_transfer(payload, 1, "q", NOW)
    assert m.content_type == "app/x" and m.annotation(BODY) == "r"
    assert _body_sections(encode_message(m, 1, NOW)) == payload[payload.index(b"\x00\x53\x75") :]


def test_application_property_types_map_onto_the_core():
    from proton import byte, char, short, ubyte, uint, ushort

    p = PMessage(
        body="x",
        properties={
            "i": int32(1),
            "l": 5,
            "f": 1.25,
            "ub": ubyte(1),
            "us": ushort(2),
            "by": byte(-1),
            "sh": short(-2),
            "ui": uint(3),
            "ul": ulong(4),
            "sym": symbol("s"),
            "ch": char("c"),
        },
    )
    m, _ = _in(p)
    props = m.application_properties
    assert type(props["i"]) is Int32 and type(props["l"]) is int and type(props["f"]) is float
    for k in ("ub", "us", "by", "sh"):
        assert type(props[k]) is Int32
    assert type(props["ui"]) is int and type(props["ul"]) is int
    assert props["sym"] == "s" and type(props["sym"]) is str and props["ch"] == "c"
    assert _out(m).properties == p.properties  # and back exactly for AMQP


def test_core_types_go_out_as_their_amqp_types():
    from waystation.core.message import Message

    m = Message(
        1,
        "q",
        b"b",
        {"i": Int32(3), "f": Float32(0.5), "t": Timestamp(5), "u": uuid.UUID(int=1), "b": b"x"},
    )
    from proton import float32, timestamp

    p = _out(m)  # kept: proton's binary values are views into the message's buffer
    props = p.properties

    assert type(props["i"]) is int32 and type(props["f"]) is float32
    assert type(props["t"]) is timestamp and props["t"] == 5
    assert bytes(props["b"]) == b"x"
    assert props["u"] == uuid.UUID(int=1)


def test_header_ttl_becomes_an_absolute_expiry():
    m, _ = _in(PMessage(body="x", ttl=2.0))
    assert m.expiration == NOW + 2000
    out = _out(m)
    assert out.ttl == 2.0  # what is left at delivery time
    assert out.expiry_time == (NOW + 2000) / 1000


def test_anonymous_relay_to_and_priority_clamp():
    m, to = _in(PMessage(address="/topic/t", body="x", priority=200), "")
    assert to == "/topic/t" and m.priority == 9


@pytest.mark.parametrize(
    "payload,why",
    [
        (b"\x00\x53\x77\xa1\x05ab", "truncated"),
        (b"\x00\x53\x77\xff", "invalid type constructor"),
        (b"\x00\x53\x74\xc1\x03\x01\xa1", "truncated"),
        (b"\x00\x53\x75\xa0\x01a\x00\x53\x73\x45", "after the body"),
        (b"\x01", "described"),
        # cut inside the forms the decoder reads in place (header, empty properties, body)
        (b"\x00\x53\x70\xc0\x02\x01", "truncated"),
        (b"\x00\x53\x73", "truncated"),
        (b"\x00\x53\x75\xa0\x05ab", "truncated"),
        (b"\x00\x53\x77\xa0", "truncated"),
        (b"\x00\x53\x75", "truncated"),
    ],
)
def test_malformed_payloads_are_decode_errors_that_say_why(payload, why):
    with pytest.raises(DecodeError, match=why):
        message_from_transfer(payload, 1, "q", NOW)


def test_codec_round_trips_nested_values():
    v = {"a": [1, Int32(2), None, True, b"x", "s" * 300, {"n": [Float32(1.5)]}]}
    assert decode_all(encode(v)) == v
