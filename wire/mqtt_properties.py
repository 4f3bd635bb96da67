"""MQTT primitive fields (variable byte integers, strings) and v5 properties, both ways.

Readers take ``(data, i, end)`` and return ``(value, next_i)``; they never read at or past
``end`` (the end of the packet, or of its property block), so a length that overruns is a
:class:`MalformedPacket`, never an IndexError. Properties are kept in a ``dict`` keyed by
the spec's names in snake_case; ``user_property`` is a list of pairs and, in PUBLISH,
``subscription_identifier`` is a list, the two properties the spec lets repeat.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from waystation.wire.mqtt_types import MalformedPacket, Properties, ProtocolError

__all__ = [
    "WILL",
    "decode_properties",
    "encode_properties",
    "encode_vbi",
    "read_binary",
    "read_string",
    "read_vbi",
    "string_bytes",
]

# Packet kinds a property may appear in: the packet type numbers, and 0 for will properties.
WILL = 0
CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, DISCONNECT, AUTH = 8, 9, 10, 11, 14, 15
_KIND_NAMES = {WILL: "will properties", 1: "CONNECT", 2: "CONNACK", 3: "PUBLISH", 4: "PUBACK",
               5: "PUBREC", 6: "PUBREL", 7: "PUBCOMP", 8: "SUBSCRIBE", 9: "SUBACK",
               10: "UNSUBSCRIBE", 11: "UNSUBACK", 14: "DISCONNECT", 15: "AUTH"}  # fmt: skip
_ACKS = {PUBACK, PUBREC, PUBREL, PUBCOMP, SUBACK, UNSUBACK}
_ALL = set(_KIND_NAMES)

BYTE, U16, U32, VBI, BINARY, STRING, PAIR = range(7)
# A check runs on a property's value before it is stored: the spec's value rules, and how
# the two repeatable properties are kept. None means "store once; a repeat is an error".
_BOOL, _NONZERO, _TOPIC, _REPEAT = range(4)
# id: (name, type, kinds, check); spec 2.2.2.2, table 2-4
_TABLE: dict[int, tuple[str, int, frozenset[int], int | None]] = {
    0x01: ("payload_format_indicator", BYTE, frozenset({PUBLISH, WILL}), _BOOL),
    0x02: ("message_expiry_interval", U32, frozenset({PUBLISH, WILL}), None),
    0x03: ("content_type", STRING, frozenset({PUBLISH, WILL}), None),
    0x08: ("response_topic", STRING, frozenset({PUBLISH, WILL}), _TOPIC),
    0x09: ("correlation_data", BINARY, frozenset({PUBLISH, WILL}), None),
    0x0B: ("subscription_identifier", VBI, frozenset({PUBLISH, SUBSCRIBE}), _REPEAT),
    0x11: ("session_expiry_interval", U32, frozenset({CONNECT, CONNACK, DISCONNECT}), None),
    0x12: ("assigned_client_identifier", STRING, frozenset({CONNACK}), None),
    0x13: ("server_keep_alive", U16, frozenset({CONNACK}), None),
    0x15: ("authentication_method", STRING, frozenset({CONNECT, CONNACK, AUTH}), None),
    0x16: ("authentication_data", BINARY, frozenset({CONNECT, CONNACK, AUTH}), None),
    0x17: ("request_problem_information", BYTE, frozenset({CONNECT}), _BOOL),
    0x18: ("will_delay_interval", U32, frozenset({WILL}), None),
    0x19: ("request_response_information", BYTE, frozenset({CONNECT}), _BOOL),
    0x1A: ("response_information", STRING, frozenset({CONNACK}), None),
    0x1C: ("server_reference", STRING, frozenset({CONNACK, DISCONNECT}), None),
    0x1F: ("reason_string", STRING, frozenset({CONNACK, DISCONNECT, AUTH} | _ACKS), None),
    0x21: ("receive_maximum", U16, frozenset({CONNECT, CONNACK}), _NONZERO),
    0x22: ("topic_alias_maximum", U16, frozenset({CONNECT, CONNACK}), None),
    0x23: ("topic_alias", U16, frozenset({PUBLISH}), _NONZERO),
    0x24: ("maximum_qos", BYTE, frozenset({CONNACK}), _BOOL),
    0x25: ("retain_available", BYTE, frozenset({CONNACK}), _BOOL),
    0x26: ("user_property", PAIR, frozenset(_ALL), _REPEAT),
    0x27: ("maximum_packet_size", U32, frozenset({CONNECT, CONNACK}), _NONZERO),
    0x28: ("wildcard_subscription_available", BYTE, frozenset({CONNACK}), _BOOL),
    0x29: ("subscription_identifier_available", BYTE, frozenset({CONNACK}), _BOOL),
    0x2A: ("shared_subscription_available", BYTE, frozenset({CONNACK}), _BOOL),
}
_VBI_MAX = 268_435_455
_VBI1 = [bytes((n,)) for n in range(128)]


def read_vbi(data: bytes, i: int, end: int) -> tuple[int, int]:
    """A Variable Byte Integer: at most 4 bytes, and no longer than needed [MQTT-1.5.5-1]."""
    value = 0
    shift = 0
    for _ in range(4):
        if i >= end:
            raise MalformedPacket(0x81, "variable byte integer runs past the end of the packet")
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if b == 0 and shift:
                raise MalformedPacket(
                    0x81, "[MQTT-1.5.5-1] variable byte integer not in its shortest form"
                )
            return value, i
        shift += 7
    raise MalformedPacket(0x81, "variable byte integer longer than 4 bytes")


def encode_vbi(n: int) -> bytes:
    if n < 128:
        return _VBI1[n]
    if n > _VBI_MAX or n < 0:
        raise ValueError(f"{n} does not fit a variable byte integer (0..{_VBI_MAX})")
    out = bytearray()
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_binary(data: bytes, i: int, end: int, what: str = "binary data") -> tuple[bytes, int]:
    if i + 2 > end:
        raise MalformedPacket(0x81, f"{what}: length runs past the end of the packet")
    j = i + 2 + ((data[i] << 8) | data[i + 1])
    if j > end:
        raise MalformedPacket(0x81, f"{what}: {j - i - 2} bytes announced, fewer in the packet")
    return data[i + 2 : j], j


def read_string(data: bytes, i: int, end: int, what: str = "string") -> tuple[str, int]:
    """A UTF-8 Encoded String: well-formed (no surrogates) [MQTT-1.5.4-1], no U+0000
    [MQTT-1.5.4-2]; U+FEFF is kept [MQTT-1.5.4-3] and U+FFFF is allowed."""
    if i + 2 > end:
        raise MalformedPacket(0x81, f"{what}: length runs past the end of the packet")
    j = i + 2 + ((data[i] << 8) | data[i + 1])
    if j > end:
        raise MalformedPacket(0x81, f"{what}: {j - i - 2} bytes announced, fewer in the packet")
    raw = data[i + 2 : j]
    if b"\x00" in raw:
        raise MalformedPacket(0x81, f"[MQTT-1.5.4-2] {what} contains U+0000")
    try:
        return raw.decode("utf-8"), j
    except UnicodeDecodeError as exc:
        raise MalformedPacket(
            0x81, f"[MQTT-1.5.4-1] {what} is not well-formed UTF-8 ({exc.reason})"
        ) from None


def _read_byte(data: bytes, i: int, end: int, what: str) -> tuple[int, int]:
    if i >= end:
        raise MalformedPacket(0x81, f"property {what} runs past the property block")
    return data[i], i + 1


def _read_u16(data: bytes, i: int, end: int, what: str) -> tuple[int, int]:
    if i + 2 > end:
        raise MalformedPacket(0x81, f"property {what} runs past the property block")
    return (data[i] << 8) | data[i + 1], i + 2


def _read_u32(data: bytes, i: int, end: int, what: str) -> tuple[int, int]:
    j = i + 4
    if j > end:
        raise MalformedPacket(0x81, f"property {what} runs past the property block")
    return int.from_bytes(data[i:j], "big"), j


def _read_vbi(data: bytes, i: int, end: int, what: str) -> tuple[int, int]:
    return read_vbi(data, i, end)


def _read_pair(data: bytes, i: int, end: int, what: str) -> tuple[tuple[str, str], int]:
    k, i = read_string(data, i, end, "user property name")
    v, i = read_string(data, i, end, "user property value")
    return (k, v), i


_READERS: dict[int, Callable[[bytes, int, int, str], tuple[Any, int]]] = {
    BYTE: _read_byte, U16: _read_u16, U32: _read_u32, VBI: _read_vbi, BINARY: read_binary,
    STRING: read_string, PAIR: _read_pair,
}  # fmt: skip
# id -> (name, reader, kinds, check), what the decoding loop uses
_DECODE = {pid: (n, _READERS[t], kinds, c) for pid, (n, t, kinds, c) in _TABLE.items()}


def string_bytes(s: str) -> bytes:
    """A UTF-8 Encoded String: two-byte length, then the bytes (no U+0000, no surrogates)."""
    if "\x00" in s:
        raise ValueError(f"[MQTT-1.5.4-2] U+0000 in string {s[:60]!r}")
    b = s.encode("utf-8")
    if len(b) > 65535:
        raise ValueError(f"string of {len(b)} bytes is over 65535: {s[:60]!r}")
    return len(b).to_bytes(2, "big") + b


def _binary_bytes(b: bytes) -> bytes:
    if len(b) > 65535:
        raise ValueError(f"binary data of {len(b)} bytes is over 65535")
    return len(b).to_bytes(2, "big") + b


def decode_properties(data: bytes, i: int, end: int, kind: int) -> tuple[Properties, int]:
    """Read a property block (its length, then the properties) of packet ``kind``."""
    if i < end and data[i] < 0x80:
        stop = i + 1 + data[i]
        i += 1
    else:
        n, i = read_vbi(data, i, end)
        stop = i + n
    if stop > end:
        raise MalformedPacket(0x81, f"property length {stop - i} runs past the end of the packet")
    props: Properties = {}
    while i < stop:
        spec = _DECODE.get(data[i])
        if spec is None:
            raise MalformedPacket(
                0x81, f"unknown property identifier 0x{data[i]:02X} (spec 2.2.2.2)"
            )
        name, reader, kinds, check = spec
        if kind not in kinds:
            raise MalformedPacket(
                0x81, f"property {name} is not allowed in {_KIND_NAMES[kind]} (spec 2.2.2.2)"
            )
        value, i = reader(data, i + 1, stop, name)
        if check is not None:
            if check == _REPEAT:
                if name == "user_property":
                    props.setdefault(name, []).append(value)
                    continue
                if value == 0:
                    raise ProtocolError(0x82, "subscription_identifier must not be 0")
                if kind == PUBLISH:
                    props.setdefault(name, []).append(value)
                    continue
            elif check == _BOOL:
                if value > 1:
                    raise ProtocolError(0x82, f"property {name} must be 0 or 1, got {value}")
            elif check == _NONZERO:
                if not value:
                    code = 0x94 if name == "topic_alias" else 0x82
                    raise ProtocolError(code, f"property {name} must not be 0")
            elif not value or "+" in value or "#" in value:
                raise ProtocolError(
                    0x82, f"[MQTT-3.3.2-14] response topic {value[:200]!r} is not a topic name"
                )
        if name in props:
            raise ProtocolError(0x82, f"property {name} appears more than once")
        props[name] = value
    return props, i


def _writer(pid: int, typ: int) -> Callable[[Any], bytes]:
    tag = _VBI1[pid]
    if typ == BYTE:
        return lambda v: tag + bytes((v,))
    if typ == U16:
        return lambda v: tag + v.to_bytes(2, "big")
    if typ == U32:
        return lambda v: tag + v.to_bytes(4, "big")
    if typ == STRING:
        return lambda v: tag + string_bytes(v)
    if typ == BINARY:
        return lambda v: tag + _binary_bytes(v)
    if typ == PAIR:
        return lambda v: b"".join(tag + string_bytes(k) + string_bytes(x) for k, x in v)
    return lambda v: (  # subscription_identifier: one, or a list of them (PUBLISH)
        b"".join(tag + encode_vbi(x) for x in v) if isinstance(v, list) else tag + encode_vbi(v)
    )


# name -> (kinds, writer of the tagged value(s))
_ENCODE = {n: (kinds, _writer(pid, t)) for pid, (n, t, kinds, _) in _TABLE.items()}


def encode_properties(props: Properties, kind: int) -> bytes:
    """A property block for packet ``kind``; an unknown or misplaced name is a ValueError."""
    if not props:
        return b"\x00"
    body = b""
    for name, value in props.items():
        spec = _ENCODE.get(name)
        if spec is None or kind not in spec[0]:
            raise ValueError(f"property {name!r} cannot be sent in {_KIND_NAMES[kind]}")
        body += spec[1](value)
    n = len(body)
    return (_VBI1[n] if n < 128 else encode_vbi(n)) + body
