"""Sans-I/O bookkeeping of the HTTP tunnel: byte offsets both ways, no sockets, no asyncio.

Each direction of the tunnelled stream is numbered by byte offset from 0.  A sender keeps
every byte it has sent until the peer acknowledges an offset past it, and always sends
from the oldest unacknowledged byte, so a request or response lost on the way (a proxy
restart, a reset connection) is simply sent again.  A receiver takes a chunk that starts
at an offset it has already reached and keeps only the bytes beyond what it has, so a
repeated chunk is harmless and nothing arrives twice or out of order.  A chunk that starts
beyond what the receiver has would leave a hole: that is an :class:`OffsetError`.

The same two classes serve both ends: the server receives upstream and sends downstream,
the client the other way round (see the aliases at the end).  The HTTP details (paths,
parameter and header names) are constants here so server and client cannot drift apart.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

# -- names shared by server and client ----------------------------------------------------
PARAM_PROTOCOL = "protocol"  # POST {path}/open?protocol=stomp
PARAM_OFFSET = "offset"  # POST {path}/{sid}/up?offset=N: the body starts at stream offset N
PARAM_ACK = "ack"  # GET {path}/{sid}/down?ack=M: the client has M downstream bytes
H_RECEIVED = "X-Tunnel-Received"  # upstream answer (and 409): upstream bytes the server has
H_OFFSET = "X-Tunnel-Offset"  # downstream answer: stream offset of the body's first byte
H_SENT = "X-Tunnel-Sent"  # 409 to a poll: downstream bytes the server has sent so far
H_CLOSED = "X-Tunnel-Closed"  # downstream answer: the stream ends after this body
H_TOKEN = "X-Tunnel-Token"  # every request after open: the secret open returned
CONTENT_TYPE = "application/octet-stream"
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{22}")  # 128 random bits, urlsafe base64
TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")  # 256 random bits, urlsafe base64
MAX_OFFSET = 2**63 - 1  # offsets fit in a signed 64-bit integer (as in Java peers)
MAX_OFFSET_DIGITS = len(str(MAX_OFFSET))  # 19: longer text is refused before int()


class OffsetError(ValueError):
    """An offset that would leave a hole or acknowledge bytes never sent; ``expected`` is
    the offset the other side should use instead."""

    def __init__(self, message: str, expected: int) -> None:
        super().__init__(message)
        self.expected = expected


def parse_offset(value: str | None, name: str) -> int:
    """A non-negative decimal offset from a query parameter or header, or ValueError whose
    text says which parameter was wrong and why."""
    if value is None:
        raise ValueError(f"{name} is required (a byte offset)")
    if not value.isascii() or not value.isdigit() or len(value) > MAX_OFFSET_DIGITS:
        raise ValueError(f"{name} must be a non-negative integer, got {value[:40]!r}")
    n = int(value)
    if n > MAX_OFFSET:
        raise ValueError(f"{name} must be at most {MAX_OFFSET}, got {value!r}")
    return n


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """The JSON body of the answer to ``open``.  ``token`` binds the session to whoever
    opened it: every later request carries it in :data:`H_TOKEN` (a header, not the URL,
    so proxies' access logs, which record URLs and so the session id, do not hold it)."""

    session: str
    response_time: float
    session_timeout: float
    token: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "token": self.token,
            "response_time": self.response_time,
            "session_timeout": self.session_timeout,
        }

    @classmethod
    def from_json(cls, data: Any) -> SessionInfo:
        """ValueError when the server's answer is not what ``open`` returns."""
        if not isinstance(data, dict):
            raise ValueError("tunnel open: the answer is not a JSON object")
        sid = data.get("session")
        if not isinstance(sid, str) or not SESSION_ID.fullmatch(sid):
            raise ValueError(f"tunnel open: bad session id {sid!r}")
        token = data.get("token", "")  # "" from a server that binds no token
        if not isinstance(token, str) or (token and not TOKEN.fullmatch(token)):
            raise ValueError("tunnel open: malformed session token")
        return cls(sid, _seconds(data, "response_time"), _seconds(data, "session_timeout"), token)


def _seconds(data: dict[str, Any], key: str) -> float:
    """A finite positive number of seconds from ``open``'s answer: NaN, infinity or <= 0
    would make the client poll in a tight loop or never time out."""
    try:
        value = float(data[key])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"tunnel open: bad timing fields ({e})") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"tunnel open: {key} must be a finite positive number, got {value}")
    return value


class Receiver:
    """The receiving end of one direction: ``received`` bytes so far, in order."""

    __slots__ = ("received",)

    def __init__(self, received: int = 0) -> None:
        self.received = received

    def accept(self, offset: int, data: bytes) -> bytes:
        """The part of ``data`` (which starts at ``offset``) that is new; it now counts as
        received.  OffsetError when ``offset`` is beyond what was received."""
        have = self.received
        if offset > have:
            raise OffsetError(f"offset {offset} is beyond the {have} bytes received", have)
        skip = have - offset
        if skip >= len(data):
            return b""
        new = data[skip:] if skip else data
        self.received = have + len(new)
        return new


class Sender:
    """The sending end of one direction: bytes from ``acked`` to ``end`` are kept until the
    peer acknowledges them.  Chunks are joined lazily, once per window, not per write."""

    __slots__ = ("acked", "_chunks", "_size")

    def __init__(self, acked: int = 0) -> None:
        self.acked = acked
        self._chunks: list[bytes] = []
        self._size = 0

    @property
    def end(self) -> int:
        """Offset just past the last byte pushed."""
        return self.acked + self._size

    @property
    def unacked(self) -> int:
        """Bytes kept for (re)transmission."""
        return self._size

    def push(self, data: bytes) -> None:
        if data:
            self._chunks.append(data)
            self._size += len(data)

    def ack(self, offset: int) -> None:
        """The peer has every byte before ``offset``: forget them.  An offset at or below
        ``acked`` (a late, repeated request) changes nothing; one beyond ``end`` is an
        OffsetError."""
        if offset > self.end:
            raise OffsetError(
                f"acknowledged {offset} but only {self.end} bytes were sent", self.end
            )
        drop = offset - self.acked
        if drop <= 0:
            return
        if drop == self._size:
            self._chunks = []
        else:
            self._chunks = [self._joined()[drop:]]
        self._size -= drop
        self.acked = offset

    def window(self, limit: int | None = None) -> tuple[int, bytes]:
        """(offset, bytes) to send now: the unacknowledged bytes, at most ``limit``."""
        data = self._joined()
        if limit is not None and len(data) > limit:
            data = data[:limit]
        return self.acked, data

    def _joined(self) -> bytes:
        chunks = self._chunks
        if not chunks:
            return b""
        if len(chunks) > 1:
            self._chunks = chunks = [b"".join(chunks)]
        return chunks[0]


# The four roles of the issue, by end and direction: the classes are the same.
UpstreamReceiver = Receiver  # server: feeds POST bodies to the protocol session
DownstreamSender = Sender  # server: answers polls, released by the client's ack
UpstreamSender = Sender  # client: POST bodies, released by the server's received count
DownstreamReceiver = Receiver  # client: poll answers, deduplicated by offset

__all__ = [
    "CONTENT_TYPE",
    "H_CLOSED",
    "H_OFFSET",
    "H_RECEIVED",
    "H_SENT",
    "H_TOKEN",
    "MAX_OFFSET_DIGITS",
    "PARAM_ACK",
    "PARAM_OFFSET",
    "PARAM_PROTOCOL",
    "SESSION_ID",
    "TOKEN",
    "DownstreamReceiver",
    "DownstreamSender",
    "OffsetError",
    "Receiver",
    "Sender",
    "SessionInfo",
    "UpstreamReceiver",
    "UpstreamSender",
    "parse_offset",
]
