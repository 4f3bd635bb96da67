"""The SASL layer (AMQP 1.0 part 5.3), in front of proton's transport.

Proton's built-in server SASL cannot check a password against the node's users, and the
check must run off the loop; so this layer answers the SASL exchange itself and hands proton
only the AMQP layer that follows.  Mechanisms: ANONYMOUS and PLAIN while security is off,
PLAIN alone while it is on, and EXTERNAL first when the TLS link has a verified client
certificate (its subject names the user; session.py checks it).
"""

from __future__ import annotations

import struct
from enum import Enum
from typing import Any

from waystation.gateway.amqp.codec import (
    Array,
    DecodeError,
    Described,
    Symbol,
    decode_all,
    encode,
    encode_described,
    encode_fields,
)

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
TLS_HEADER = b"AMQP\x02\x01\x00\x00"

MECHANISMS, INIT, CHALLENGE, RESPONSE, OUTCOME = 0x40, 0x41, 0x42, 0x43, 0x44
OK, AUTH, SYS, SYS_PERM, SYS_TEMP = 0, 1, 2, 3, 4
MAX_SASL_FRAME = 4096  # a SASL frame larger than this is refused (spec minimum is 512)
_head = struct.Struct(">IBBH")


class SaslError(Exception):
    """The client broke the SASL exchange: close the connection."""


class Phase(Enum):
    HEADER = 1  # waiting for the protocol header
    INIT = 2  # mechanisms sent, waiting for sasl-init
    CHECKING = 3  # credentials handed to the authenticator
    AMQP_HEADER = 4  # outcome sent, waiting for the AMQP header
    DONE = 5  # everything from here is proton's


def frame(performative: int, fields: list[bytes]) -> bytes:
    body = encode_described(performative, encode_fields(fields))
    return _head.pack(8 + len(body), 2, 1, 0) + body


def mechanisms_frame(names: list[str]) -> bytes:
    return frame(MECHANISMS, [encode(Array(0xA3, [Symbol(n) for n in names]))])


def outcome_frame(code: int) -> bytes:
    return frame(OUTCOME, [bytes((0x50, code))])


class SaslServer:
    """Feed bytes; it says what to write and, once done, which bytes are proton's."""

    def __init__(self, mechanisms: list[str]) -> None:
        self.mechanisms = mechanisms
        self.phase = Phase.HEADER
        self.buf = bytearray()
        self.sasl_used = False

    def feed(self, data: bytes) -> tuple[bytes, tuple[str, bytes] | None]:
        """-> (bytes to write, (mechanism, initial response) once sasl-init arrived).  In
        phase DONE, ``self.buf`` holds what proton must get next."""
        self.buf += data
        out = b""
        if self.phase is Phase.HEADER:
            if len(self.buf) < 8:
                if not SASL_HEADER.startswith(bytes(self.buf)) and not AMQP_HEADER.startswith(
                    bytes(self.buf)
                ):
                    raise SaslError(f"not an AMQP 1.0 protocol header: {bytes(self.buf)!r}")
                return b"", None
            head = bytes(self.buf[:8])
            if head == AMQP_HEADER:
                self.phase = Phase.DONE  # no SASL: the caller decides whether that is allowed
                return b"", None
            if head != SASL_HEADER:
                raise SaslError(f"unsupported protocol header {head!r}: expected AMQP SASL")
            del self.buf[:8]
            self.sasl_used = True
            self.phase = Phase.INIT
            out = SASL_HEADER + mechanisms_frame(self.mechanisms)
        if self.phase is Phase.INIT:
            perf = self._frame()
            if perf is None:
                return out, None
            if perf.descriptor != INIT or not isinstance(perf.value, list) or not perf.value:
                raise SaslError("expected sasl-init")
            mech = perf.value[0]
            resp = perf.value[1] if len(perf.value) > 1 and perf.value[1] is not None else b""
            if not isinstance(mech, str) or not isinstance(resp, bytes):
                raise SaslError("sasl-init: mechanism or initial-response of the wrong type")
            self.phase = Phase.CHECKING
            return out, (str(mech), resp)
        if self.phase is Phase.AMQP_HEADER and len(self.buf) >= 8:
            head = bytes(self.buf[:8])
            if head != AMQP_HEADER:
                raise SaslError(f"expected the AMQP header after SASL, got {head!r}")
            self.phase = Phase.DONE  # proton gets the header and what follows
        return out, None

    def succeeded(self) -> bytes:
        self.phase = Phase.AMQP_HEADER
        return outcome_frame(OK)

    def _frame(self) -> Described | None:
        buf = self.buf
        if len(buf) < 8:
            return None
        size, doff, ftype, _ = _head.unpack_from(buf, 0)
        if ftype != 1 or doff < 2 or size < doff * 4:
            raise SaslError("malformed SASL frame header")
        if size > MAX_SASL_FRAME:
            raise SaslError(f"SASL frame of {size} bytes exceeds {MAX_SASL_FRAME}")
        if len(buf) < size:
            return None
        body = bytes(buf[doff * 4 : size])
        del buf[:size]
        try:
            v: Any = decode_all(body)
        except DecodeError as e:
            raise SaslError(f"undecodable SASL frame: {e}") from None
        if not isinstance(v, Described):
            raise SaslError("SASL frame body is not a performative")
        return v


def plain_credentials(response: bytes) -> tuple[str, str]:
    """PLAIN's ``authzid NUL authcid NUL passwd`` -> (login, password)."""
    parts = response.split(b"\x00")
    if len(parts) != 3:
        raise SaslError("PLAIN response is not authzid NUL authcid NUL password")
    try:
        return parts[1].decode(), parts[2].decode()
    except UnicodeDecodeError:
        raise SaslError("PLAIN credentials are not UTF-8") from None


__all__ = [
    "AMQP_HEADER",
    "AUTH",
    "OK",
    "SASL_HEADER",
    "SYS",
    "Phase",
    "SaslError",
    "SaslServer",
    "outcome_frame",
    "plain_credentials",
]
