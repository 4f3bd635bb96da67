"""The AMQP 1.0 type system (spec part 1), encoded and decoded by hand.

Proton's engine runs the protocol; this codec reads and writes what travels inside transfer
payloads (message sections), SASL frames and transaction control messages.  Doing it here,
not through ``proton.Message``, lets the mapping keep a body section byte for byte, keep the
exact type of every application property, and do no more per message than the message needs.

Python values: ``None``, ``bool``, ``int`` (long), :class:`Int32` (int), ``float`` (double),
:class:`Float32` (float), ``str`` (string), ``bytes`` (binary), :class:`Timestamp`,
``uuid.UUID``, ``list``, ``dict``; the AMQP types with no core equivalent are the small
wrappers below (:class:`Symbol`, :class:`UByte` ...), plus :class:`Described` and
:class:`Array`.  Decoding raises :class:`DecodeError` with what was wrong and where.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from waystation.core.message import Float32, Int32, Timestamp


class DecodeError(ValueError):
    """Bytes that are not valid AMQP 1.0 encoding (answered ``amqp:decode-error``)."""


class Symbol(str):
    __slots__ = ()


class Char(str):
    __slots__ = ()


class UByte(int):
    __slots__ = ()


class UShort(int):
    __slots__ = ()


class UInt(int):
    __slots__ = ()


class ULong(int):
    __slots__ = ()


class Byte(int):
    __slots__ = ()


class Short(int):
    __slots__ = ()


class Decimal(bytes):
    """decimal32/64/128, kept as their raw bytes (nothing here does arithmetic on them)."""

    __slots__ = ()


class Described:
    __slots__ = ("descriptor", "value")

    def __init__(self, descriptor: Any, value: Any) -> None:
        self.descriptor = descriptor
        self.value = value

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Described)
            and self.descriptor == other.descriptor
            and self.value == other.value
        )

    def __repr__(self) -> str:
        return f"Described({self.descriptor!r}, {self.value!r})"


class Array(list[Any]):
    """An AMQP array: elements of one type, named by ``code`` (a constructor byte)."""

    __slots__ = ("code",)

    def __init__(self, code: int, items: list[Any]) -> None:
        super().__init__(items)
        self.code = code


_u8 = struct.Struct(">B")
_u16 = struct.Struct(">H")
_u32 = struct.Struct(">I")
_u64 = struct.Struct(">Q")
_i8 = struct.Struct(">b")
_i16 = struct.Struct(">h")
_i32 = struct.Struct(">i")
_i64 = struct.Struct(">q")
_f32 = struct.Struct(">f")
_f64 = struct.Struct(">d")
_two_u8 = struct.Struct(">BB")
_two_u32 = struct.Struct(">II")

# -- decoding ---------------------------------------------------------------------------------
Reader = Callable[[bytes, int], tuple[Any, int]]


def _need(buf: bytes, end: int) -> None:
    if end > len(buf):
        raise DecodeError(f"truncated: needs {end} bytes, has {len(buf)}")


def _fixed(n: int, conv: Callable[[bytes, int], Any]) -> Reader:
    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        end = pos + n
        if end > len(buf):
            _need(buf, end)
        return conv(buf, pos), end

    return read


def _vbin(width: int, conv: Callable[[bytes], Any]) -> Reader:
    size = _u8 if width == 1 else _u32

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        start = pos + width
        if start > len(buf):
            _need(buf, start)
        (n,) = size.unpack_from(buf, pos)
        end = start + n
        if end > len(buf):
            _need(buf, end)
        return conv(buf[start:end]), end

    return read


def _utf8(b: bytes) -> str:
    try:
        return b.decode()
    except UnicodeDecodeError as e:
        raise DecodeError(f"string is not UTF-8: {e}") from None


def _sym(b: bytes) -> Symbol:
    try:
        return Symbol(b.decode("ascii"))
    except UnicodeDecodeError:
        raise DecodeError("symbol is not ASCII") from None


def _compound(width: int, is_map: bool) -> Reader:
    head = _two_u8 if width == 1 else _two_u32

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        _need(buf, pos + 2 * width)
        size, count = head.unpack_from(buf, pos)
        end = pos + width + size
        _need(buf, end)
        p = pos + 2 * width
        items = []
        for _ in range(count):
            v, p = decode_value(buf, p)
            items.append(v)
        if p != end:
            raise DecodeError(f"compound size {size} does not match its {count} elements")
        if not is_map:
            return items, end
        if count % 2:
            raise DecodeError("map with an odd number of elements")
        it = iter(items)
        try:
            return dict(zip(it, it, strict=True)), end
        except TypeError:
            raise DecodeError("map key of an unhashable type") from None

    return read


def _array(width: int) -> Reader:
    head = _two_u8 if width == 1 else _two_u32

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        _need(buf, pos + 2 * width + 1)
        size, count = head.unpack_from(buf, pos)
        end = pos + width + size
        _need(buf, end)
        p = pos + 2 * width
        code = buf[p]
        p += 1
        descriptor = None
        if code == 0:
            descriptor, p = decode_value(buf, p)
            _need(buf, p + 1)
            code = buf[p]
            p += 1
        reader = _READERS[code]
        if reader is None:
            raise DecodeError(f"invalid array element constructor 0x{code:02x}")
        items = []
        for _ in range(count):
            v, p = reader(buf, p)
            items.append(v if descriptor is None else Described(descriptor, v))
        if p != end:
            raise DecodeError(f"array size {size} does not match its {count} elements")
        return Array(code, items), end

    return read


_READERS: list[Reader | None] = [None] * 256


def _reg(code: int, reader: Reader) -> None:
    _READERS[code] = reader


_reg(0x40, lambda b, p: (None, p))
_reg(0x41, lambda b, p: (True, p))
_reg(0x42, lambda b, p: (False, p))
_reg(0x56, _fixed(1, lambda b, p: b[p] != 0))
_reg(0x50, _fixed(1, lambda b, p: UByte(b[p])))
_reg(0x60, _fixed(2, lambda b, p: UShort(_u16.unpack_from(b, p)[0])))
_reg(0x70, _fixed(4, lambda b, p: UInt(_u32.unpack_from(b, p)[0])))
_reg(0x52, _fixed(1, lambda b, p: UInt(b[p])))
_reg(0x43, lambda b, p: (UInt(0), p))
_reg(0x80, _fixed(8, lambda b, p: ULong(_u64.unpack_from(b, p)[0])))
_reg(0x53, _fixed(1, lambda b, p: ULong(b[p])))
_reg(0x44, lambda b, p: (ULong(0), p))
_reg(0x51, _fixed(1, lambda b, p: Byte(_i8.unpack_from(b, p)[0])))
_reg(0x61, _fixed(2, lambda b, p: Short(_i16.unpack_from(b, p)[0])))
_reg(0x71, _fixed(4, lambda b, p: Int32(_i32.unpack_from(b, p)[0])))
_reg(0x54, _fixed(1, lambda b, p: Int32(_i8.unpack_from(b, p)[0])))
_reg(0x81, _fixed(8, lambda b, p: _i64.unpack_from(b, p)[0]))
_reg(0x55, _fixed(1, lambda b, p: _i8.unpack_from(b, p)[0]))
_reg(0x72, _fixed(4, lambda b, p: Float32(_f32.unpack_from(b, p)[0])))
_reg(0x82, _fixed(8, lambda b, p: _f64.unpack_from(b, p)[0]))
_reg(0x74, _fixed(4, lambda b, p: Decimal(b[p : p + 4])))
_reg(0x84, _fixed(8, lambda b, p: Decimal(b[p : p + 8])))
_reg(0x94, _fixed(16, lambda b, p: Decimal(b[p : p + 16])))


def _char(b: bytes, p: int) -> Char:
    try:
        return Char(chr(_u32.unpack_from(b, p)[0]))
    except ValueError:
        raise DecodeError("char out of the Unicode range") from None


_reg(0x73, _fixed(4, _char))
_reg(0x83, _fixed(8, lambda b, p: Timestamp(_i64.unpack_from(b, p)[0])))
_reg(0x98, _fixed(16, lambda b, p: uuid.UUID(bytes=bytes(b[p : p + 16]))))
_reg(0xA0, _vbin(1, bytes))
_reg(0xB0, _vbin(4, bytes))
_reg(0xA1, _vbin(1, _utf8))
_reg(0xB1, _vbin(4, _utf8))
_reg(0xA3, _vbin(1, _sym))
_reg(0xB3, _vbin(4, _sym))
_reg(0x45, lambda b, p: ([], p))
_reg(0xC0, _compound(1, False))
_reg(0xD0, _compound(4, False))
_reg(0xC1, _compound(1, True))
_reg(0xD1, _compound(4, True))
_reg(0xE0, _array(1))
_reg(0xF0, _array(4))


def _described(buf: bytes, pos: int) -> tuple[Any, int]:
    descriptor, pos = decode_value(buf, pos)
    value, pos = decode_value(buf, pos)
    return Described(descriptor, value), pos


_reg(0x00, _described)


def decode_value(buf: bytes, pos: int = 0) -> tuple[Any, int]:
    """One value at ``pos`` -> (value, position after it)."""
    if pos >= len(buf):
        raise DecodeError(f"truncated: a value expected at byte {pos}")
    reader = _READERS[buf[pos]]
    if reader is None:
        raise DecodeError(f"invalid type constructor 0x{buf[pos]:02x} at byte {pos}")
    try:
        return reader(buf, pos + 1)
    except RecursionError:
        raise DecodeError("values nested too deeply") from None
    except struct.error as e:
        raise DecodeError(f"truncated value at byte {pos}: {e}") from None


def decode_all(buf: bytes) -> Any:
    """Exactly one value filling ``buf``."""
    v, end = decode_value(buf, 0)
    if end != len(buf):
        raise DecodeError(f"{len(buf) - end} bytes after the value")
    return v


# -- encoding ---------------------------------------------------------------------------------
def _enc_str(s: str, small: int, large: int) -> bytes:
    b = s.encode()
    n = len(b)
    if n < 256:
        return bytes((small, n)) + b
    return bytes((large,)) + _u32.pack(n) + b


def encode_binary(b: bytes) -> bytes:
    n = len(b)
    if n < 256:
        return bytes((0xA0, n)) + b
    return b"\xb0" + _u32.pack(n) + b


def encode_string(s: str) -> bytes:
    return _enc_str(s, 0xA1, 0xB1)


def encode_symbol(s: str) -> bytes:
    return _enc_str(s, 0xA3, 0xB3)


def encode_ulong(v: int) -> bytes:
    if v == 0:
        return b"\x44"
    if v < 256:
        return bytes((0x53, v))
    return b"\x80" + _u64.pack(v)


def encode_uint(v: int) -> bytes:
    if v == 0:
        return b"\x43"
    if v < 256:
        return bytes((0x52, v))
    return b"\x70" + _u32.pack(v)


def encode_long(v: int) -> bytes:
    if -128 <= v <= 127:
        return b"\x55" + _i8.pack(v)
    return b"\x81" + _i64.pack(v)


def encode_int(v: int) -> bytes:
    if -128 <= v <= 127:
        return b"\x54" + _i8.pack(v)
    return b"\x71" + _i32.pack(v)


def encode_timestamp(v: int) -> bytes:
    return b"\x83" + _i64.pack(v)


def _compound_bytes(items: list[bytes], count: int, small: int, large: int) -> bytes:
    body = b"".join(items)
    if len(body) < 255 and count < 256:
        return bytes((small, len(body) + 1, count)) + body
    return bytes((large,)) + _two_u32.pack(len(body) + 4, count) + body


def encode_list(items: list[Any]) -> bytes:
    if not items:
        return b"\x45"
    return _compound_bytes([encode(v) for v in items], len(items), 0xC0, 0xD0)


def encode_map(m: dict[Any, Any]) -> bytes:
    parts = []
    for k, v in m.items():
        parts.append(encode(k))
        parts.append(encode(v))
    return _compound_bytes(parts, len(parts), 0xC1, 0xD1)


def encode_fields(parts: list[bytes]) -> bytes:
    """A list of already-encoded fields (trailing nulls dropped by the caller)."""
    if not parts:
        return b"\x45"
    return _compound_bytes(parts, len(parts), 0xC0, 0xD0)


def encode_described(code: int, body: bytes) -> bytes:
    """A described value whose descriptor is the small ulong ``code``."""
    return bytes((0x00, 0x53, code)) + body


def _enc_float32(v: float) -> bytes:
    return b"\x72" + _f32.pack(v)


def _enc_array(a: Array) -> bytes:
    code = a.code
    parts = [encode(v) for v in a]
    # element bodies: strip each element's own constructor and re-use the array's
    elems = []
    for p in parts:
        if p[0] != code:
            p = _widen(p, code)
        elems.append(p[1:])
    body = bytes((code,)) + b"".join(elems)
    if len(body) < 255 and len(a) < 256:
        return bytes((0xE0, len(body) + 1, len(a))) + body
    return b"\xf0" + _two_u32.pack(len(body) + 4, len(a)) + body


def _widen(p: bytes, code: int) -> bytes:
    """An element re-encoded in the array's (wide) constructor."""
    v = decode_all(p)
    if code == 0xB1:
        b = v.encode()
        return b"\xb1" + _u32.pack(len(b)) + b
    if code == 0xB3:
        b = v.encode("ascii")
        return b"\xb3" + _u32.pack(len(b)) + b
    if code == 0xB0:
        return b"\xb0" + _u32.pack(len(v)) + v
    if code == 0x81:
        return b"\x81" + _i64.pack(v)
    if code == 0x71:
        return b"\x71" + _i32.pack(v)
    if code == 0x80:
        return b"\x80" + _u64.pack(v)
    if code == 0x70:
        return b"\x70" + _u32.pack(v)
    if code == 0x56:
        return b"\x56" + (b"\x01" if v else b"\x00")
    raise DecodeError(f"cannot encode an array of constructor 0x{code:02x}")


_ENCODERS: dict[type, Callable[[Any], bytes]] = {
    type(None): lambda v: b"\x40",
    bool: lambda v: b"\x41" if v else b"\x42",
    int: encode_long,
    Int32: encode_int,
    float: lambda v: b"\x82" + _f64.pack(v),
    Float32: _enc_float32,
    str: encode_string,
    bytes: encode_binary,
    bytearray: lambda v: encode_binary(bytes(v)),
    memoryview: lambda v: encode_binary(bytes(v)),
    Timestamp: encode_timestamp,
    uuid.UUID: lambda v: b"\x98" + v.bytes,
    Symbol: encode_symbol,
    Char: lambda v: b"\x73" + _u32.pack(ord(v)),
    UByte: lambda v: b"\x50" + _u8.pack(v),
    UShort: lambda v: b"\x60" + _u16.pack(v),
    UInt: encode_uint,
    ULong: encode_ulong,
    Byte: lambda v: b"\x51" + _i8.pack(v),
    Short: lambda v: b"\x61" + _i16.pack(v),
    Decimal: lambda v: bytes(({4: 0x74, 8: 0x84, 16: 0x94}[len(v)],)) + v,
    list: encode_list,
    dict: encode_map,
    Array: _enc_array,
    Described: lambda v: b"\x00" + encode(v.descriptor) + encode(v.value),
}


def encode(v: Any) -> bytes:
    """``v`` in its AMQP encoding (the compact form where there is one)."""
    enc = _ENCODERS.get(type(v))
    if enc is None:
        raise TypeError(f"{type(v).__name__} has no AMQP encoding")
    try:
        return enc(v)
    except struct.error as e:
        raise ValueError(f"{v!r} does not fit its AMQP type: {e}") from None


# descriptors by name (spec part 1.5: a descriptor is a ulong code or its symbol)
CODES = {
    "amqp:declare:list": 0x31,
    "amqp:discharge:list": 0x32,
    "amqp:declared:list": 0x33,
    "amqp:transactional-state:list": 0x34,
    "amqp:accepted:list": 0x24,
    "amqp:rejected:list": 0x25,
    "amqp:released:list": 0x26,
    "amqp:modified:list": 0x27,
}


def descriptor_code(d: Any) -> int:
    """A descriptor as its numeric code (0 when unknown)."""
    if isinstance(d, str):
        return CODES.get(str(d), 0)
    return int(d) if isinstance(d, int) else 0


__all__ = [
    "descriptor_code",
    "Array",
    "Byte",
    "Char",
    "DecodeError",
    "Decimal",
    "Described",
    "Short",
    "Symbol",
    "UByte",
    "UInt",
    "ULong",
    "UShort",
    "decode_all",
    "decode_value",
    "encode",
    "encode_binary",
    "encode_described",
    "encode_fields",
    "encode_int",
    "encode_list",
    "encode_long",
    "encode_map",
    "encode_string",
    "encode_symbol",
    "encode_timestamp",
    "encode_uint",
    "encode_ulong",
]
