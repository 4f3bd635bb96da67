"""Sans-I/O STOMP 1.0/1.1/1.2 codec: bytes in -> frames out, frames -> bytes.

No sockets here, so one codec serves TCP, WebSocket and the HTTP tunnel, and every path
is unit-testable and fuzzable. The parser is on the broker's hot path, so it works on whole
buffers with ``bytes.find``, decodes each header block in one call, unescapes only when a
backslash is present and copies a body once (twice only when it arrived over several
``feed`` calls and the buffer is small enough for the extra copy to be cheaper).

Choices the specs leave open:

- Every EOL outside a frame (LF or CRLF) is one :data:`HEARTBEAT` event, so the events do not
  depend on how the stream was chunked.
- One CR before the LF that ends the command or a header line is dropped in every version;
  other whitespace is kept (1.0 values are not stripped).
- ``content-length`` may be padded with spaces or tabs (old 1.0 clients write ``key: value``).
- ``STOMP`` is treated like ``CONNECT``: never unescaped or escaped.
- After a CONNECT, STOMP or CONNECTED frame, :meth:`StompParser.feed` returns at once, so the
  session can set :attr:`StompParser.version` before later frames are unescaped; call
  ``feed(b"")`` to parse what was buffered behind it.
- Encoding never lets a header break framing: where a version has no escapes (1.0, connect
  frames) CR and LF become spaces and ``:`` in a name becomes ``_``; STOMP 1.1 has no escape
  for CR, so a CR goes out raw (harmless mid-value, lost at the end of a value).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar

__all__ = [
    "HEARTBEAT",
    "HEARTBEAT_BYTES",
    "Frame",
    "Heartbeat",
    "Limits",
    "StompError",
    "StompParser",
    "encode_frame",
    "encode_message",
    "encode_receipt",
]

HEARTBEAT_BYTES = b"\n"

_MiB = 1024 * 1024
_COMMANDS = {
    c.encode(): c
    for c in (
        "SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK", "BEGIN", "COMMIT", "ABORT",
        "DISCONNECT", "CONNECT", "STOMP", "CONNECTED", "MESSAGE", "RECEIPT", "ERROR",
    )
}  # fmt: skip
_JOIN_BELOW = 16384  # a buffered remainder up to this size is copied, not parsed in place
_RAW_COMMANDS = frozenset(("CONNECT", "STOMP", "CONNECTED"))  # never escaped (spec)
_UNESCAPES: dict[str, dict[str, str] | None] = {
    "1.0": None,
    "1.1": {"\\": "\\", "n": "\n", "c": ":"},
    "1.2": {"\\": "\\", "n": "\n", "c": ":", "r": "\r"},
}


class StompError(Exception):
    """A protocol violation; ``message`` is meant for the ERROR frame's ``message`` header."""

    def __init__(self, message: str, detail: str = "", receipt_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.receipt_id = receipt_id


class Frame:
    """One STOMP frame. ``headers`` keeps received order; a repeated header's first value wins."""

    __slots__ = ("command", "headers", "body")

    def __init__(self, command: str, headers: dict[str, str], body: bytes = b"") -> None:
        self.command = command
        self.headers = headers
        self.body = body

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Frame):
            return NotImplemented
        return (self.command, self.headers, self.body) == (other.command, other.headers, other.body)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"Frame({self.command!r}, {self.headers!r}, {self.body[:64]!r})"


class Heartbeat:
    """A bare EOL between frames; there is one instance, :data:`HEARTBEAT`."""

    __slots__ = ()
    _instance: ClassVar[Heartbeat | None] = None

    def __new__(cls) -> Heartbeat:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "HEARTBEAT"


HEARTBEAT = Heartbeat()


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-connection caps, enforced as soon as a violation is visible, not at frame end."""

    max_frame_size: int = 10 * _MiB
    max_headers: int = 1000
    max_header_length: int = 10240
    max_body_size: int = 10 * _MiB
    max_command_length: int = 64


def _unescape(s: str, table: dict[str, str]) -> str:
    out: list[str] = []
    i = 0
    while (j := s.find("\\", i)) >= 0:
        out.append(s[i:j])
        c = s[j + 1 : j + 2]
        r = table.get(c)
        if r is None:
            raise StompError(f"undefined escape sequence \\{c}", f"in header text {s[:200]!r}")
        out.append(r)
        i = j + 2
    out.append(s[i:])
    return "".join(out)


def _bad_line(line: str) -> StompError:
    return StompError("malformed header line", f"expected name:value, got {line[:200]!r}")


def _check_command(raw: bytes | bytearray) -> str:
    try:
        command = raw.decode("ascii")
    except UnicodeDecodeError:
        command = ""
    if not command or not command.isprintable():
        raise StompError("invalid command line", f"got {bytes(raw[:80])!r}")
    return command


class StompParser:
    """Incremental parser: :meth:`feed` bytes, get frames and heart-beats back.

    ``version`` is "1.0" until the session layer sets "1.1" or "1.2" after CONNECTED; it
    selects header unescaping. After a :class:`StompError` the parser stays dead.
    """

    __slots__ = ("limits", "_version", "_esc", "_buf", "_dead", "_hold", "_need", "_head",
                 "_body", "_scan")  # fmt: skip

    def __init__(self, limits: Limits = Limits()) -> None:
        self.limits = limits
        self._version = "1.0"
        self._esc: dict[str, str] | None = None
        self._buf = bytearray()  # holds only an incomplete frame (or what _hold kept back)
        self._dead = False
        self._hold = False  # stopped after a connect frame
        self._need = 0  # do not parse again until the buffer holds this many bytes
        # Resume points, offsets relative to the start of the buffered frame:
        self._head: tuple[str, int, int, int] | None = None  # command, nl, next line, count
        self._body: tuple[str, dict[str, str], int, int] | None = None  # cmd, hdrs, start, cl
        self._scan = 0  # no NUL before this offset (body without content-length)

    @property
    def version(self) -> str:
        return self._version

    @version.setter
    def version(self, value: str) -> None:
        if value not in _UNESCAPES:
            raise ValueError(f"unsupported STOMP version {value!r}")
        self._version = value
        self._esc = _UNESCAPES[value]

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame | Heartbeat]:
        """Consume ``data``; return every complete frame and heart-beat, in order."""
        if self._dead:
            raise StompError("connection closed after a protocol error")
        if type(data) is not bytes:
            data = bytes(data)
        events: list[Frame | Heartbeat] = []
        buf = self._buf
        self._hold = False
        try:
            start = 0
            if buf:
                old = len(buf)
                if old + len(data) < self._need:
                    buf += data
                    return events
                if old <= _JOIN_BELOW:  # cheaper to copy a small remainder than to go slow
                    data = bytes(buf) + data
                    buf.clear()
                else:
                    # Finish the frame that straddles the chunks in place (one copy of its
                    # body), then parse the rest straight from ``data``.
                    buf += data
                    pos = self._run(buf, 0, old, events)
                    if pos < old or self._hold:
                        del buf[:pos]
                        return events
                    start = pos - old
                    buf.clear()
            pos = self._run(data, start, len(data), events)
            if pos < len(data):
                buf += memoryview(data)[pos:]
        except StompError:
            self._dead = True
            buf.clear()
            raise
        return events

    def _run(
        self, src: bytes | bytearray, pos: int, stop: int, events: list[Frame | Heartbeat]
    ) -> int:
        """Parse frames starting before ``stop``; return the offset of the first byte not
        consumed (the start of an incomplete frame, or where a connect frame ended)."""
        n = len(src)
        lim = self.limits
        cmd_span = lim.max_command_length + 2
        head_span = lim.max_header_length + 2
        in_place = type(src) is not bytes
        resume = self._body
        self._need = 0
        while pos < stop:
            if resume is None:
                c = src[pos]
                if c == 10 and self._head is None:
                    events.append(HEARTBEAT)
                    pos += 1
                    continue
                if c == 13 and self._head is None:
                    if pos + 1 == n:
                        return pos
                    if src[pos + 1] == 10:
                        events.append(HEARTBEAT)
                        pos += 2
                        continue
                # Fast path: a known command and a head shorter than one maximal header line,
                # found with one search; anything unusual goes to _parse_head.
                text: str | None = None
                if self._head is None and not in_place:
                    nl = src.find(b"\n", pos, pos + cmd_span)
                    if nl > 0:  # src[pos] is not LF, so nl > pos
                        known = _COMMANDS.get(src[pos:nl])  # type: ignore[arg-type]  # bytes
                        if known is not None:
                            e = src.find(b"\n\n", nl, nl + head_span)
                            crlf = False
                        elif src[nl - 1] == 13:
                            known = _COMMANDS.get(src[pos : nl - 1])  # type: ignore[arg-type]
                            e = src.find(b"\r\n\r\n", nl - 1, nl + head_span)
                            crlf = True
                        if known is not None and e >= 0:
                            command = known
                            bs = e + 4 if crlf else e + 2
                            try:
                                text = src[nl + 1 : e].decode("utf-8") if e > nl else ""
                            except UnicodeDecodeError as exc:
                                raise StompError("header is not valid UTF-8", str(exc)) from None
                            if crlf:
                                if "\r" in text:
                                    text = text.replace("\r\n", "\n")
                                if text[:1] == "\n" or "\n\n" in text:
                                    text = None  # an earlier blank line: go slow
                            elif "\r" in text:
                                text = None  # maybe CR LF line endings after all: go slow
                if text is None:
                    head = self._parse_head(src, pos, n)
                    if head is None:
                        return pos
                    command, text, bs = head
                if not text:
                    headers: dict[str, str] = {}
                elif "\\" in text and self._esc is not None and command not in _RAW_COMMANDS:
                    headers = self._unescaped_headers(text)
                else:
                    headers = {}
                    lines = text.split("\n")
                    if len(lines) > lim.max_headers:
                        raise StompError(
                            f"too many headers: more than max_headers ({lim.max_headers})"
                        )
                    for line in lines:
                        name, sep, value = line.partition(":")
                        if not sep or not name:
                            raise _bad_line(line)
                        if name not in headers:
                            headers[name] = value
                cls = headers.get("content-length")
                if cls is None:
                    cl = -1
                else:
                    cl = (
                        int(cls)
                        if cls.isdigit() and cls.isascii()
                        else _content_length(cls, headers)
                    )
                    if cl > lim.max_body_size:
                        raise StompError(
                            f"content-length {cl} exceeds max_body_size ({lim.max_body_size} bytes)",
                            "",
                            headers.get("receipt"),
                        )
                    if bs - pos + cl + 1 > lim.max_frame_size:
                        raise _too_big("frame", lim.max_frame_size, headers)
            else:  # resuming the buffered frame, which starts at pos == 0
                command, headers, bs, cl = resume
                resume = self._body = None
            if cl >= 0:
                end = bs + cl
                if end >= n:
                    self._body = (command, headers, bs - pos, cl)
                    self._need = end + 1 - pos
                    return pos
                if src[end] != 0:
                    raise StompError(
                        "frame not terminated by NUL after content-length bytes",
                        f"content-length was {cl}",
                        headers.get("receipt"),
                    )
            else:
                end = src.find(b"\0", max(bs, pos + self._scan))
                limit = end if end >= 0 else n
                if limit - bs > lim.max_body_size:
                    raise _too_big("body", lim.max_body_size, headers)
                if limit - pos + 1 > lim.max_frame_size:
                    raise _too_big("frame", lim.max_frame_size, headers)
                if end < 0:
                    self._body = (command, headers, bs - pos, cl)
                    self._scan = n - pos
                    return pos
                self._scan = 0
            if in_place:
                with memoryview(src) as view:
                    body = view[bs:end].tobytes()
            else:
                body = src[bs:end]  # type: ignore[assignment]
            events.append(Frame(command, headers, body))
            pos = end + 1
            if command in _RAW_COMMANDS:
                self._hold = True  # let the session set the negotiated version first
                return pos
        return pos

    def _parse_head(self, src: bytes | bytearray, pos: int, n: int) -> tuple[str, str, int] | None:
        """The general path for a head at ``pos``: (command, header text without the final EOL,
        body start), or None when incomplete (a resume point is saved)."""
        lim = self.limits
        if self._head is None:
            mc = lim.max_command_length
            nl = src.find(b"\n", pos, pos + mc + 2)
            if nl < 0:
                if n - pos >= mc + 2:
                    raise StompError(f"command line exceeds max_command_length ({mc} bytes)")
                return None
            ce = nl - 1 if src[nl - 1] == 13 else nl  # src[pos] is not LF, so nl > pos
            if ce - pos > mc:
                raise StompError(f"command line exceeds max_command_length ({mc} bytes)")
            raw = src[pos:ce]
            command = _COMMANDS.get(bytes(raw)) or _check_command(raw)
            p = nl + 1
            count = 0
        else:
            command, nl, p, count = self._head
            nl += pos
            p += pos
            self._head = None
        # One line at a time, so that every limit is checked before buffering any further.
        mh = lim.max_header_length
        maxh = lim.max_headers
        while True:
            e = src.find(b"\n", p, p + mh + 2)
            if e < 0:
                if n - p >= mh + 2:
                    raise StompError(f"header line exceeds max_header_length ({mh} bytes)")
                if n - pos > lim.max_frame_size:
                    raise StompError(f"frame exceeds max_frame_size ({lim.max_frame_size} bytes)")
                self._head = (command, nl - pos, p - pos, count)
                return None
            if e == p or (e == p + 1 and src[p] == 13):
                break
            count += 1
            if count > maxh:
                raise StompError(f"too many headers: more than max_headers ({maxh})")
            if e - p > mh and (e - p > mh + 1 or src[e - 1] != 13):
                raise StompError(f"header line exceeds max_header_length ({mh} bytes)")
            p = e + 1
        if e + 1 - pos > lim.max_frame_size:
            raise StompError(f"frame exceeds max_frame_size ({lim.max_frame_size} bytes)")
        if not count:
            return command, "", e + 1
        text = _decode(src[nl + 1 : p])
        if "\r" in text:
            text = text.replace("\r\n", "\n")
        return command, text[:-1], e + 1

    def _unescaped_headers(self, text: str) -> dict[str, str]:
        """Split a header block that holds escapes; the first of repeated headers wins."""
        esc = self._esc
        assert esc is not None
        lines = text.split("\n")
        if len(lines) > self.limits.max_headers:
            raise StompError(f"too many headers: more than max_headers ({self.limits.max_headers})")
        headers: dict[str, str] = {}
        for line in lines:
            name, sep, value = line.partition(":")
            if not sep or not name:
                raise _bad_line(line)
            name = _unescape(name, esc)
            value = _unescape(value, esc)  # checked even when a repeat is dropped
            if name not in headers:
                headers[name] = value
        return headers


def _decode(raw: bytes | bytearray) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StompError("header is not valid UTF-8", str(exc)) from None


def _content_length(value: str, headers: dict[str, str]) -> int:
    digits = value if value.isdigit() else value.strip(" \t")
    if not (digits.isascii() and digits.isdigit()):
        raise StompError(
            "invalid content-length header", f"got {value[:40]!r}", headers.get("receipt")
        )
    return int(digits)


def _too_big(what: str, limit: int, headers: dict[str, str]) -> StompError:
    return StompError(f"{what} exceeds max_{what}_size ({limit} bytes)", "", headers.get("receipt"))


def _esc_11(s: str) -> str:
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\c")


def _esc_12(s: str) -> str:
    return s.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n").replace(":", "\\c")


def _raw_value(s: str) -> str:
    return s.replace("\r", " ").replace("\n", " ")


def _raw_name(s: str) -> str:
    return s.replace("\r", " ").replace("\n", " ").replace(":", "_")


# Per version: (escape a name, escape a value); "1.0" also serves connect frames.
_ESCAPERS: dict[str, tuple[Callable[[str], str], Callable[[str], str]]] = {
    "1.0": (_raw_name, _raw_value),
    "1.1": (_esc_11, _esc_11),
    "1.2": (_esc_12, _esc_12),
}


def _escapers(command: str, version: str) -> tuple[Callable[[str], str], Callable[[str], str]]:
    try:
        return _ESCAPERS["1.0" if command in _RAW_COMMANDS else version]
    except KeyError:
        raise ValueError(f"unsupported STOMP version {version!r}") from None


def _needs_escape(text: str, lines: int, version: str) -> bool:
    """True unless ``text`` has exactly one ':' and one LF per header line and no CR or '\\'."""
    return (
        text.count(":") != lines
        or text.count("\n") != lines
        or "\\" in text
        or ("\r" in text and version != "1.1")
    )


def _cl_tail(body: bytes, content_length: bool | None) -> str | None:
    if (bool(body) if content_length is None else content_length) or b"\0" in body:
        return f"\ncontent-length:{len(body)}"
    return None


def encode_receipt(receipt_id: str, version: str = "1.2") -> bytes:
    """Fast path for RECEIPT frames (one per durable send in receipt-per-message workloads)."""
    if ":" in receipt_id or "\n" in receipt_id or "\r" in receipt_id or "\\" in receipt_id:
        return encode_frame("RECEIPT", {"receipt-id": receipt_id}, b"", version)
    return b"RECEIPT\nreceipt-id:" + receipt_id.encode() + b"\n\n\x00"


def encode_frame(
    command: str,
    headers: Mapping[str, str] | Iterable[tuple[str, str]],
    body: bytes = b"",
    version: str = "1.2",
    *,
    content_length: bool | None = None,
) -> bytes:
    """Serialise a frame, escaping headers for ``version`` (never for connect frames).

    ``content-length`` is computed here (a caller's value is ignored): by default it is
    sent when the body is non-empty; ``content_length=False`` omits it (a text message,
    see research §10.5) unless the body holds a NUL, ``True`` always sends it.
    """
    items = list(headers.items() if isinstance(headers, dict | Mapping) else headers)
    tail = _cl_tail(body, content_length)
    text, lines = _head_text(command, items, tail)
    if version not in _ESCAPERS or _needs_escape(
        text, lines, "1.0" if command in _RAW_COMMANDS else version
    ):
        escape_name, escape_value = _escapers(command, version)
        items = [(escape_name(k), escape_value(v)) for k, v in items]
        text, lines = _head_text(command, items, tail)
    return b"".join((text.encode("utf-8"), b"\n\n", body, b"\0"))


def _head_text(command: str, items: Iterable[tuple[str, str]], tail: str | None) -> tuple[str, int]:
    """The command and header lines (no final blank line), and the number of headers."""
    parts = [command]
    for k, v in items:
        if k != "content-length":
            parts += ("\n", k, ":", v)
    if tail is not None:
        parts.append(tail)
    return "".join(parts), len(parts) // 4 + (tail is not None)


def encode_message(
    destination: str,
    message_id: str,
    subscription: str,
    body: bytes,
    extra_headers: Mapping[str, str] | None = None,
    ack: str | None = None,
    version: str = "1.2",
    *,
    content_length: bool | None = None,
) -> bytes:
    """Fast path for MESSAGE frames; the same bytes as :func:`encode_frame` with these
    headers first (so, first-wins, an extra header can never override them)."""
    parts = ["MESSAGE\ndestination:", destination, "\nmessage-id:", message_id,
             "\nsubscription:", subscription]  # fmt: skip
    if ack is not None:
        parts += ("\nack:", ack)
    lines = len(parts) // 2
    fixed_end = len(parts)
    if extra_headers:
        for k, v in extra_headers.items():
            if k != "content-length":
                parts += ("\n", k, ":", v)
                lines += 1
    extra_end = len(parts)
    tail = _cl_tail(body, content_length)
    if tail is not None:
        parts.append(tail)
        lines += 1
    text = "".join(parts)
    if version not in _ESCAPERS or _needs_escape(text, lines, version):
        escape_name, escape_value = _escapers("MESSAGE", version)
        for i in range(1, fixed_end, 2):  # the fixed names need no escaping
            parts[i] = escape_value(parts[i])
        for i in range(fixed_end, extra_end, 4):  # "\n", name, ":", value
            parts[i + 1] = escape_name(parts[i + 1])
            parts[i + 3] = escape_value(parts[i + 3])
        text = "".join(parts)
    return b"".join((text.encode("utf-8"), b"\n\n", body, b"\0"))
