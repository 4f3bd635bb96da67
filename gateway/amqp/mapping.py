"""AMQP 1.0 message sections <-> the core's typed :class:`Message` (table in docs/amqp.md).

In: :func:`message_from_transfer` reads the sections of a transfer's payload.  Out:
:func:`encode_message` writes a delivery's payload.  The rules, in short:

* **header**: ``durable`` -> durable, ``priority`` -> priority (0-9, higher clamped),
  ``ttl`` -> expiration (now + ttl, unless the properties give an absolute expiry); out,
  ``delivery-count`` is the core's attempts before this one and ``first-acquirer`` is true
  on the first attempt.
* **properties**: message-id, correlation-id (string, ulong, uuid, binary kept as such),
  user-id (UTF-8 -> text), to, subject, reply-to, content-type, content-encoding,
  absolute-expiry-time, creation-time, group-id, group-sequence -> the standard fields;
  ``reply-to-group-id`` has no field and rides in the ``_WS_P_AMQP_RTG`` annotation.
* **application-properties**: each value keeps its type; AMQP types the core lacks become
  the nearest core type (byte, short, ubyte, ushort -> int; uint, ulong -> long; symbol,
  char -> string; decimal -> binary) and the section itself is kept (``_WS_P_AMQP_AP``) so an
  AMQP consumer gets the exact types back.
* **message-annotations**: kept as the encoded section (``_WS_P_AMQP_MA``), sent back as it
  came; delivery-annotations are hop-by-hop and dropped.
* **body**: one ``data`` section -> the bytes (no marker: a message from any other protocol
  goes out as one data section too); one ``amqp-value`` string -> its UTF-8 text
  (``_WS_P_AMQP_BODY = "s"``); one ``amqp-value`` binary -> the bytes (``"b"``); anything
  else (amqp-sequence, other amqp-values, several data sections, a footer) -> the encoded
  sections themselves as the body, with content-type ``application/x-amqp-body`` when the
  message had none (``"R"``; ``"r"`` when it had one).  Whatever the body, an AMQP consumer
  gets the producer's body sections byte for byte: when the compact re-encoding of a simple
  body would differ from what arrived, the section itself is kept in ``_WS_P_AMQP_BODY``.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from waystation.core.message import (
    DEFAULT_PRIORITY,
    DESTINATION,
    FIELD_INDEX,
    Float32,
    Int32,
    Message,
    PropertyValue,
    Timestamp,
    now_ms,
)
from waystation.gateway.amqp.codec import (
    Array,
    Byte,
    Char,
    Decimal,
    DecodeError,
    Described,
    Short,
    Symbol,
    UByte,
    UInt,
    ULong,
    UShort,
    decode_value,
    encode,
    encode_binary,
    encode_fields,
    encode_string,
    encode_symbol,
    encode_timestamp,
    encode_uint,
    encode_ulong,
)

BODY = "_WS_P_AMQP_BODY"  # how the body was sent (see module doc); absent: one data section
APP_PROPERTIES = "_WS_P_AMQP_AP"  # the application-properties section, when types need it
MESSAGE_ANNOTATIONS = "_WS_P_AMQP_MA"  # the message-annotations section as it came
REPLY_TO_GROUP = "_WS_P_AMQP_RTG"
# a message relayed by a bridge from another node keeps its trace id (STOMP: ws-trace-id)
TRACE_PROPERTY = "_WS_TRACE_ID"
PRIVATE = frozenset((BODY, APP_PROPERTIES, MESSAGE_ANNOTATIONS, REPLY_TO_GROUP, DESTINATION))
SECTIONS_TYPE = "application/x-amqp-body"

HEADER, DELIVERY_ANN, MESSAGE_ANN, PROPERTIES, APP_PROPS, DATA, SEQUENCE, VALUE, FOOTER = range(
    0x70, 0x79
)
_SYMBOLIC = {
    "amqp:header:list": HEADER,
    "amqp:delivery-annotations:map": DELIVERY_ANN,
    "amqp:message-annotations:map": MESSAGE_ANN,
    "amqp:properties:list": PROPERTIES,
    "amqp:application-properties:map": APP_PROPS,
    "amqp:data:binary": DATA,
    "amqp:amqp-sequence:list": SEQUENCE,
    "amqp:amqp-value:*": VALUE,
    "amqp:footer:map": FOOTER,
}
_MAX_PRIORITY = 9
_CORE_TYPES = (type(None), bool, int, Int32, float, Float32, str, bytes, Timestamp, uuid.UUID)
_NEAREST: dict[type, Any] = {
    Byte: Int32,
    Short: Int32,
    UByte: Int32,
    UShort: Int32,
    UInt: int,
    ULong: int,
    Symbol: str,
    Char: str,
    Decimal: bytes,
}
_ID_TYPES = (str, int, uuid.UUID, bytes)
# header sections (list8 encodings) already decoded: a producer sends the same few (durable,
# priority, ttl); the decoded lists are only read, never changed
_HEADERS: dict[bytes, list[Any]] = {}
_HEADERS_MAX = 256
_EMPTY_PROPS = b"\x00\x53\x73\x45"  # a properties section that is an empty list
_DATA_BIN = b"\x00\x53\x75\xa0"  # a data section of fewer than 256 bytes
_VALUE_BIN = b"\x00\x53\x77\xa0"  # an amqp-value binary of fewer than 256 bytes


def _section_code(buf: bytes, pos: int) -> tuple[int, int]:
    """The section's descriptor code and where its value starts."""
    if buf[pos] != 0:
        raise DecodeError(f"byte {pos}: expected a described section, got 0x{buf[pos]:02x}")
    if pos + 2 < len(buf) and buf[pos + 1] == 0x53:
        return buf[pos + 2], pos + 3
    d, p = decode_value(buf, pos + 1)
    code = _SYMBOLIC.get(d) if isinstance(d, str) else d if isinstance(d, int) else None
    if code is None or not HEADER <= code <= FOOTER:
        raise DecodeError(f"byte {pos}: unknown section descriptor {d!r}")
    return code, p


def _field(fields: list[Any], i: int) -> Any:
    return fields[i] if i < len(fields) else None


def message_from_transfer(
    payload: bytes, msg_id: int, address: str, now: int, user: str | None = None
) -> tuple[Message, str | None]:
    """The message a transfer carries -> (message, its ``to`` or None).

    ``address`` is the link's target (or "" for the anonymous relay: the caller routes by the
    returned ``to``).  DecodeError (or ValueError for a value the core cannot hold) names
    what was wrong."""
    buf = payload if type(payload) is bytes else bytes(payload)
    n = len(buf)
    # the plain message first: a header (none, empty or a known list8), no or empty
    # properties, then one short binary body (data or amqp-value) and nothing else
    pos = 0
    header: list[Any] | None = None
    if buf[:3] == b"\x00\x53\x70":
        c = buf[3] if n > 3 else 0
        if c == 0x45:
            pos = 4
        elif c == 0xC0 and n > 4:
            end = 5 + buf[4]
            header = _HEADERS.get(buf[3:end])
            if header is not None:
                pos = end
    if buf[pos : pos + 4] == _EMPTY_PROPS:
        pos += 4
    if pos + 4 < n:
        sec = buf[pos : pos + 4]
        if sec in (_DATA_BIN, _VALUE_BIN) and pos + 5 + buf[pos + 4] == n:
            msg = Message(msg_id, address, buf[pos + 5 :], None, False, 4, now)
            if header:
                msg.durable = bool(header[0])
                if len(header) > 1:
                    prio = header[1]
                    if prio is not None:
                        msg.priority = min(int(prio), _MAX_PRIORITY)
                    ttl = _field(header, 2)
                    if ttl:
                        msg.expiration = now + int(ttl)
            if sec == _VALUE_BIN:
                msg._ann = {BODY: "b"}
            if user is not None:
                msg.user_id = user
            return msg, None
    pos = 0
    props = app = None
    ann: dict[str, PropertyValue] | None = None
    body_start = -1
    body_kinds: list[int] = []
    value: Any = None
    value_at = 0
    while pos < n:
        if buf[pos] == 0 and pos + 3 < n and buf[pos + 1] == 0x53:  # the usual short form
            code = buf[pos + 2]
            p = pos + 3
        else:
            code, p = _section_code(buf, pos)
        if code >= DATA:
            if body_start < 0:
                body_start = pos
            if code != FOOTER:
                value_at = p
            end = p + 2 + buf[p + 1] if p + 1 < n and buf[p] == 0xA0 else n + 1
            if end <= n:  # a short binary (data, or amqp-value binary), read in place
                value, pos = buf[p + 2 : end], end
            else:
                value, pos = decode_value(buf, p)
            body_kinds.append(code)
            continue
        if body_start >= 0:
            raise DecodeError(f"byte {pos}: section 0x{code:02x} after the body")
        if code == HEADER and p + 1 < n and buf[p] == 0xC0:  # list8: a producer's few forms
            end = p + 2 + buf[p + 1]
            key = buf[p:end]
            header = _HEADERS.get(key)
            if header is None:
                v, end = decode_value(buf, p)
                header = _fields(v, "header")
                if len(_HEADERS) < _HEADERS_MAX:
                    _HEADERS[key] = header
            pos = end
            continue
        if code == PROPERTIES and p < n and buf[p] == 0x45:  # list0: no properties at all
            pos = p + 1
            continue
        v, end = decode_value(buf, p)
        if code == HEADER:
            header = _fields(v, "header")
        elif code == PROPERTIES:
            props = _fields(v, "properties")
        elif code == APP_PROPS:
            if not isinstance(v, dict):
                raise DecodeError("application-properties is not a map")
            app = v
            if any(type(x) not in _CORE_TYPES for x in v.values()) or any(
                type(k) is not str for k in v
            ):
                ann = ann or {}
                ann[APP_PROPERTIES] = bytes(buf[pos:end])
        elif code == MESSAGE_ANN:
            if not isinstance(v, dict):
                raise DecodeError("message-annotations is not a map")
            if v:
                ann = ann or {}
                ann[MESSAGE_ANNOTATIONS] = bytes(buf[pos:end])
        pos = end
    to: str | None = None
    msg = Message(msg_id, address, b"", _properties(app) if app else None, False, 4, now)
    if header:
        msg.durable = bool(_field(header, 0))
        prio = _field(header, 1)
        if prio is not None:
            msg.priority = min(int(prio), _MAX_PRIORITY)
        ttl = _field(header, 2)
        if ttl:
            msg.expiration = now + int(ttl)
    if props:
        to = _apply_properties(msg, props, now)
        if props[-1] is not None and len(props) > 12:
            ann = ann or {}
            ann[REPLY_TO_GROUP] = _text(props[12], "reply-to-group-id")
    if user is not None and msg.user_id is None:
        msg.user_id = user
    if app and TRACE_PROPERTY in app:
        trace = msg._props.pop(TRACE_PROPERTY, None)
        if isinstance(trace, str) and 0 < len(trace) <= 256:
            msg.trace_id = trace
    kind = _body(msg, buf, body_start, body_kinds, value, value_at)
    if kind is not None:
        ann = ann or {}
        ann[BODY] = kind
    if ann:
        msg._ann = ann
    return msg, to


def _fields(v: Any, what: str) -> list[Any]:
    if not isinstance(v, list):
        raise DecodeError(f"{what} section is not a list")
    return v


def _text(v: Any, what: str) -> str:
    if isinstance(v, str):
        return str(v)
    raise DecodeError(f"{what} is {type(v).__name__}, expected a string")


def _properties(app: dict[Any, Any]) -> dict[str, PropertyValue]:
    out: dict[str, PropertyValue] = {}
    for k, v in app.items():
        if not isinstance(k, str):
            raise DecodeError(f"application-properties key {k!r} is not a string")
        t = type(v)
        if t in _CORE_TYPES:
            out[k] = v
            continue
        conv = _NEAREST.get(t)
        if conv is None:
            raise DecodeError(
                f"application-properties value {k!r} is {t.__name__}: only simple types are allowed"
            )
        out[str(k)] = conv(v)
    return out


def _apply_properties(msg: Message, p: list[Any], now: int) -> str | None:
    std: list[PropertyValue] = [None] * len(FIELD_INDEX)
    if len(p) < 12:
        p = p + [None] * (12 - len(p))  # absent trailing fields read as null
    mid = p[0]
    if mid is not None:
        std[0] = _id(mid, "message-id")
    uid = p[1]
    if uid is not None:
        if not isinstance(uid, bytes):
            raise DecodeError("user-id is not binary")
        try:
            std[5] = uid.decode()
        except UnicodeDecodeError:
            raise DecodeError("user-id is not UTF-8 text") from None
    to = p[2]
    if to is not None:
        to = _text(to, "to")
    subject = p[3]
    if subject is not None:
        std[6] = _text(subject, "subject")
    reply_to = p[4]
    if reply_to is not None:
        std[2] = _text(reply_to, "reply-to")
    cid = p[5]
    if cid is not None:
        std[1] = _id(cid, "correlation-id")
    ct = p[6]
    if ct is not None:
        std[3] = _text(ct, "content-type")
    ce = p[7]
    if ce is not None:
        std[4] = _text(ce, "content-encoding")
    exp = p[8]
    if exp is not None:
        msg.expiration = int(exp)
    created = p[9]
    if created is not None:
        msg.timestamp = int(created)
    gid = p[10]
    if gid is not None:
        std[7] = _text(gid, "group-id")
    gseq = p[11]
    if gseq is not None:
        std[8] = int(gseq)
    if any(x is not None for x in std):
        msg._std = std
    return to


def _id(v: Any, what: str) -> PropertyValue:
    if isinstance(v, bool) or not isinstance(v, _ID_TYPES):
        raise DecodeError(f"{what} is {type(v).__name__}: expected string, ulong, uuid or binary")
    if isinstance(v, str):
        return str(v)
    if isinstance(v, int):
        if v < 0:
            raise DecodeError(f"{what} is a negative number: expected ulong")
        return int(v)
    return v


def _body(
    msg: Message, buf: bytes, start: int, kinds: list[int], value: Any, value_at: int
) -> str | bytes | None:
    """Set the body; returns the ``_WS_P_AMQP_BODY`` marker (None: one canonical data)."""
    if start < 0:
        msg.body = b""
        return "n"
    if len(kinds) == 1:
        k = kinds[0]
        # the one section runs to the end; is it what encode_message writes back (a short
        # descriptor, then the compact width)?  Else the section itself is kept.
        short = value_at == start + 3 and buf[start + 1] == 0x53
        if k == DATA and type(value) is bytes:
            msg.body = value
            return (
                None
                if short and _compact(buf, value_at, len(value), 0xA0, 0xB0)
                else bytes(buf[start:])
            )
        if k == VALUE and type(value) is str:
            msg.body = body = value.encode()
            return (
                "s"
                if short and _compact(buf, value_at, len(body), 0xA1, 0xB1)
                else bytes(buf[start:])
            )
        if k == VALUE and type(value) is bytes:
            msg.body = value
            return (
                "b"
                if short and _compact(buf, value_at, len(value), 0xA0, 0xB0)
                else bytes(buf[start:])
            )
    msg.body = bytes(buf[start:])
    if msg.content_type is None:
        msg.content_type = SECTIONS_TYPE
        return "R"
    return "r"


def _compact(buf: bytes, at: int, size: int, small: int, large: int) -> bool:
    """Whether the value at ``at`` (``size`` bytes) has the width the encoder would choose."""
    return buf[at] == (small if size < 256 else large)


# -- out ----------------------------------------------------------------------------------
_HEADER_PREFIX = b"\x00\x53\x70"
_PROPS_PREFIX = b"\x00\x53\x73"
_APP_PREFIX = b"\x00\x53\x74"
_DATA_PREFIX = b"\x00\x53\x75"
_VALUE_PREFIX = b"\x00\x53\x77"
_NULL = b"\x40"
_TRUE = b"\x41"
_FIRST = _HEADER_PREFIX + encode_fields([_NULL, _NULL, _NULL, _TRUE])
_DURABLE_FIRST = _HEADER_PREFIX + encode_fields([_TRUE, _NULL, _NULL, _TRUE])


def encode_message(msg: Message, delivery_count: int, now: int | None = None) -> bytes:
    """The payload of one delivery of ``msg`` (``delivery_count``: the core's count, 1 on
    the first attempt; ``now``: for the header's ttl, read when needed if not given)."""
    ann = msg._ann
    if (
        msg._std is None
        and not msg._props
        and delivery_count <= 1
        and msg.timestamp
        and not msg.expiration
        and msg.priority == DEFAULT_PRIORITY
        and (ann is None or ann.keys() <= _PLAIN_ANN)
    ):
        # the plain message (no standard field but ``to`` and the creation time, no
        # properties, a binary body): the sections as one join of constants
        kind = ann.get(BODY) if ann else None  # absent or "b": binary in data or amqp-value
        if kind is None or kind == "b":
            to = ann.get(DESTINATION) if ann else None
            to_s = msg.address if to is None else str(to)
            pre = _PLAIN.get(to_s)
            if pre is None:
                pre = _plain_prefix(to_s)
            body = msg.body
            n = len(body)
            return b"".join(
                (
                    _DURABLE_FIRST if msg.durable else _FIRST,
                    pre,
                    _i64.pack(msg.timestamp),
                    (_DATA_PREFIX if kind is None else _VALUE_PREFIX),
                    bytes((0xA0, n)) if n < 256 else b"\xb0" + _u32.pack(n),
                    body,
                )
            )
    if now is None:
        now = now_ms()
    out: list[bytes] = []
    # header: always (first-acquirer or delivery-count is news); the usual ones are constants
    prio = msg.priority
    exp = msg.expiration
    if prio == DEFAULT_PRIORITY and not exp and delivery_count <= 1:
        out.append(_DURABLE_FIRST if msg.durable else _FIRST)
    else:
        h = [
            _TRUE if msg.durable else _NULL,
            b"\x50" + bytes((prio,)) if prio != DEFAULT_PRIORITY else _NULL,
            encode_uint(max(1, exp - now)) if exp else _NULL,
            _TRUE if delivery_count <= 1 else _NULL,
        ]
        if delivery_count > 1:
            h.append(encode_uint(delivery_count - 1))
        out.append(_HEADER_PREFIX + encode_fields(h))
    if ann:
        ma = ann.get(MESSAGE_ANNOTATIONS)
        if ma is not None:
            out.append(ma)  # type: ignore[arg-type]
    out.append(_PROPS_PREFIX + encode_fields(_props_fields(msg, ann)))
    app = _app_section(msg, ann)
    if app is not None:
        out.append(app)
    out.append(_body_out(msg, ann))
    return b"".join(out)


# the encoded ``to`` of recent addresses (every delivery carries its address)
_TO: dict[str, bytes] = {}
_TO_MAX = 1024
# address -> a plain message's properties section up to its creation-time value
_PLAIN: dict[str, bytes] = {}
_PLAIN_ANN = frozenset((BODY, DESTINATION))  # annotations a plain message may carry
_i64 = struct.Struct(">q")
_u32 = struct.Struct(">I")


def _plain_prefix(address: str) -> bytes:
    """The properties section of a message with only ``to`` and creation-time, without the
    time's 8 bytes (the same bytes _props_fields writes for it)."""
    fields = [_NULL, _NULL, encode_string(address), *([_NULL] * 6), encode_timestamp(0)]
    pre = (_PROPS_PREFIX + encode_fields(fields))[:-8]
    if len(_PLAIN) >= _TO_MAX:
        _PLAIN.clear()
    _PLAIN[address] = pre
    return pre


def _props_fields(msg: Message, ann: dict[str, PropertyValue] | None) -> list[bytes]:
    std = msg._std
    to = ann.get(DESTINATION) if ann else None
    f: list[bytes] = [_NULL] * 13
    if std is not None:
        if std[0] is not None:
            f[0] = _encode_id(std[0])
        if std[5] is not None:
            u = std[5]
            f[1] = encode_binary(u.encode() if isinstance(u, str) else u)  # type: ignore[arg-type]
        if std[6] is not None:
            f[3] = encode_string(std[6])  # type: ignore[arg-type]
        if std[2] is not None:
            f[4] = encode_string(std[2])  # type: ignore[arg-type]
        if std[1] is not None:
            f[5] = _encode_id(std[1])
        ct = std[3]
        if ct is not None and not (ct == SECTIONS_TYPE and ann and ann.get(BODY) == "R"):
            f[6] = encode_symbol(ct)  # type: ignore[arg-type]
        if std[4] is not None:
            f[7] = encode_symbol(std[4])  # type: ignore[arg-type]
        if std[7] is not None:
            f[10] = encode_string(std[7])  # type: ignore[arg-type]
        if std[8] is not None:
            f[11] = encode_uint(int(std[8]))
    to_s = str(to) if to is not None else msg.address
    enc = _TO.get(to_s)
    if enc is None:
        if len(_TO) >= _TO_MAX:
            _TO.clear()
        enc = _TO[to_s] = encode_string(to_s)
    f[2] = enc
    if msg.expiration:
        f[8] = encode_timestamp(msg.expiration)
    if msg.timestamp:
        f[9] = encode_timestamp(msg.timestamp)
    if ann:
        rtg = ann.get(REPLY_TO_GROUP)
        if rtg is not None:
            f[12] = encode_string(str(rtg))
    while f and f[-1] is _NULL:
        f.pop()
    return f


def _encode_id(v: PropertyValue) -> bytes:
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return encode_ulong(v)
    if isinstance(v, (str, bytes, uuid.UUID)):
        return encode(v)
    return encode_string(str(v))


def _app_section(msg: Message, ann: dict[str, PropertyValue] | None) -> bytes | None:
    props = msg._props
    extra = None
    if ann:
        if not ann.keys() <= PRIVATE:  # core annotations other protocols see as properties
            extra = {k: v for k, v in ann.items() if k not in PRIVATE}
        raw = ann.get(APP_PROPERTIES)
        if raw is not None:
            if not extra:
                return raw  # type: ignore[return-value]
            m = decode_value(raw, 3)[0]  # type: ignore[arg-type]
            m.update(extra)
            return _APP_PREFIX + encode(m)
    if not props and not extra:
        return None
    if extra:
        props = {**props, **extra}
    try:
        return _APP_PREFIX + encode(props)
    except (TypeError, ValueError):  # a value from elsewhere that has no AMQP type
        return _APP_PREFIX + encode({k: _plain(v) for k, v in props.items()})


def _plain(v: Any) -> Any:
    return v if type(v) in _CORE_TYPES else str(v)


def _body_out(msg: Message, ann: dict[str, PropertyValue] | None) -> bytes:
    kind = ann.get(BODY) if ann else None
    if kind is None:
        return _DATA_PREFIX + encode_binary(msg.body)
    if kind == "s":
        return _VALUE_PREFIX + encode_string(msg.body.decode("utf-8", "replace"))
    if kind == "b":
        return _VALUE_PREFIX + encode_binary(msg.body)
    if kind == "r" or kind == "R":
        return msg.body
    if kind == "n":
        return b""
    if isinstance(kind, bytes):
        return kind
    return _DATA_PREFIX + encode_binary(msg.body)


def is_declared(v: Any, code: int) -> bool:
    return isinstance(v, Described) and v.descriptor == code


__all__ = [
    "APP_PROPERTIES",
    "Array",
    "BODY",
    "MESSAGE_ANNOTATIONS",
    "PRIVATE",
    "SECTIONS_TYPE",
    "TRACE_PROPERTY",
    "encode_message",
    "message_from_transfer",
]
