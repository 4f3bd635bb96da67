"""The property types a plain Python value cannot tell apart: 32-bit int, 32-bit float, timestamp.

Kept out of ``core/message.py`` (which re-exports them) because that module is compiled with
mypyc, and a compiled class cannot subclass ``int`` or ``float``.
"""

from __future__ import annotations

import math
import struct
import uuid


class Int32(int):
    """A property of the 32-bit ``int`` type (a plain ``int`` is a 64-bit ``long``)."""

    __slots__ = ()

    def __new__(cls, value: object = 0) -> Int32:
        v = int.__new__(cls, value)  # type: ignore[call-overload]
        if not -0x80000000 <= v <= 0x7FFFFFFF:
            raise ValueError(f"{int(v)} does not fit a 32-bit int")
        return v

    def __repr__(self) -> str:
        return f"Int32({int(self)})"


class Float32(float):
    """A property of the 32-bit ``float`` type (a plain ``float`` is a ``double``); the value
    is rounded to single precision when made, so what is stored is what is read back."""

    __slots__ = ()

    def __new__(cls, value: object = 0.0) -> Float32:
        v = float(value)  # type: ignore[arg-type]
        if math.isfinite(v):
            try:
                v = struct.unpack(">f", struct.pack(">f", v))[0]
            except OverflowError:
                raise ValueError(f"{v!r} does not fit a 32-bit float") from None
        return float.__new__(cls, v)

    def __repr__(self) -> str:
        return f"Float32({float(self)!r})"


class Timestamp(int):
    """A property of the ``timestamp`` type: milliseconds since the epoch (UTC)."""

    __slots__ = ()

    def __new__(cls, value: object = 0) -> Timestamp:
        v = int.__new__(cls, value)  # type: ignore[call-overload]
        if not -(2**63) <= v < 2**63:
            raise ValueError(f"{int(v)} does not fit a 64-bit timestamp")
        return v

    def __repr__(self) -> str:
        return f"Timestamp({int(self)})"


PropertyValue = bool | int | float | str | bytes | uuid.UUID | None
