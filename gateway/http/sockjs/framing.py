"""SockJS frames (sockjs-protocol 0.3.3): what the server sends and how it reads payloads.

Server to client: ``o`` (open), ``h`` (heart-beat), ``a[...]`` (a JSON array of messages)
and ``c[code,"reason"]`` (close).  Client to server: a JSON array of strings (or a single
JSON string on WebSocket).  Characters that browsers or proxies mangle are sent escaped.
"""

from __future__ import annotations

import json
import re

OPEN = "o"
HEARTBEAT = "h"
GO_AWAY = (3000, "Go away!")
ANOTHER_CONNECTION = (2010, "Another connection still open")
INTERRUPTED = (1002, "Connection interrupted")
SERVER_SHUTDOWN = (1001, "Server shutting down")
PUSHED_OUT = (3001, "Not logged in: place given to a newer session (max_unauthenticated_sessions)")

# sockjs-protocol's escapable_by_server, plus lone surrogates (never valid in UTF-8)
_ESCAPE = re.compile("[\x00-\x1f\u200c-\u200f\u2028-\u202f\u2060-\u206f\ud800-\udfff\ufff0-\uffff]")


class PayloadError(ValueError):
    """A client payload the server refuses; ``str(e)`` is the answer body's text."""


def _escape(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group()):04x}"


def messages(texts: list[str]) -> str:
    """An ``a`` frame carrying ``texts`` in order."""
    body = json.dumps(texts, ensure_ascii=False, separators=(",", ":"))
    if not body.isascii():
        body = _ESCAPE.sub(_escape, body)
    return "a" + body


def close(code: int, reason: str) -> str:
    return "c" + json.dumps([code, reason], separators=(",", ":"))


def decode_payload(raw: bytes | str, single_ok: bool = False) -> list[str]:
    """The messages in a client payload, in order (``single_ok``: a bare JSON string, as
    the WebSocket transport allows).  Empty payloads and broken JSON raise PayloadError
    with the spec's wording."""
    if not raw:
        raise PayloadError("Payload expected.")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):  # deep nesting: never valid
        raise PayloadError("Broken JSON encoding.") from None
    if single_ok and isinstance(data, str):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(m, str) for m in data):
        raise PayloadError("Broken JSON encoding.")
    return data


def to_bytes(texts: list[str]) -> list[bytes]:
    """Messages as the UTF-8 bytes a STOMP session reads; a lone surrogate (which a
    JavaScript string may hold) is refused rather than mangled."""
    try:
        return [t.encode() for t in texts]
    except UnicodeEncodeError:
        raise PayloadError("Broken JSON encoding: lone UTF-16 surrogate.") from None


__all__ = [
    "ANOTHER_CONNECTION",
    "GO_AWAY",
    "HEARTBEAT",
    "INTERRUPTED",
    "OPEN",
    "SERVER_SHUTDOWN",
    "PayloadError",
    "close",
    "decode_payload",
    "messages",
    "to_bytes",
]
