"""The two probes as plain bytes, for the HTTP port before its web application is built.

An orchestrator asks ``/health`` and ``/ready`` every few seconds; answering them needs the
node's state and nothing of aiohttp, so the port answers them itself (the same status, JSON
body and ``Server`` header as :mod:`.health`) and a node that is only ever probed never
loads the web stack (about 13 MB resident and a quarter of a second).  Any other request
builds the application (see :mod:`.front`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from waystation.gateway.stomp.session import SERVER_NAME

if TYPE_CHECKING:
    from waystation.core.engine import Engine

PROBES = ("/health", "/ready")
MAX_HEAD = 8190  # aiohttp's own limit on a request line and on each header


class Probed(Protocol):
    """What the probes read (an ``HttpContext`` has it)."""

    @property
    def engine(self) -> Engine: ...

    @property
    def ready(self) -> Callable[[], bool] | None: ...


def readiness(ctx: Probed, draining: bool) -> tuple[bool, str]:
    """``/ready``'s answer: (ready, why)."""
    if draining:
        return False, "stopping"
    ready: Callable[[], bool] | None = ctx.ready
    if ready is not None:
        return (True, "ready") if ready() else (False, "starting or stopping")
    return (True, "ready") if ctx.engine.started else (False, "store not recovered")


def plain_response(status: str, text: str) -> bytes:
    """A complete ``text/plain`` response that closes the connection."""
    body = (text + "\n").encode()
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\nServer: {SERVER_NAME}\r\n\r\n"
    )
    return head.encode() + body


def header_timeout_response(timeout: float) -> bytes:
    """The ``408`` for a request head not complete within ``header_timeout``."""
    return plain_response(
        "408 Request Timeout", f"header_timeout: request headers not complete within {timeout:g}s"
    )


@dataclass(frozen=True, slots=True)
class Probe:
    """A complete request head that asks one of :data:`PROBES` and carries no body."""

    method: str  # GET or HEAD
    path: str
    keep_alive: bool


def parse_probe(head: bytes) -> Probe | None:
    """``head`` (up to and without the blank line) as a probe, or None for anything else."""
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
    except ValueError:
        return None
    if method not in ("GET", "HEAD") or version not in ("HTTP/1.1", "HTTP/1.0"):
        return None
    if target.split("?", 1)[0] not in PROBES:
        return None
    keep_alive = version == "HTTP/1.1"
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or name != name.strip():
            return None  # malformed: aiohttp says why
        name, value = name.lower(), value.strip().lower()
        if name in ("content-length", "transfer-encoding", "upgrade"):
            if name != "content-length" or value != "0":
                return None  # a body or an upgrade: not a probe
        elif name == "connection":
            tokens = {t.strip() for t in value.split(",")}
            keep_alive = "close" not in tokens and (keep_alive or "keep-alive" in tokens)
    return Probe(method, target.split("?", 1)[0], keep_alive)


def answer(probe: Probe, ctx: Probed, draining: bool) -> bytes:
    """The response to ``probe``, as :mod:`.health` would give it."""
    if probe.path == "/health":
        ok, why = True, "ok"
    else:
        ok, why = readiness(ctx, draining)
    body = json.dumps({"status": why, "node": ctx.engine.node_name}).encode()
    head = (
        f"HTTP/1.1 {'200 OK' if ok else '503 Service Unavailable'}\r\n"
        "Content-Type: application/json; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nServer: {SERVER_NAME}\r\n"
        f"Connection: {'keep-alive' if probe.keep_alive else 'close'}\r\n\r\n"
    )
    return head.encode() + (b"" if probe.method == "HEAD" else body)


__all__ = [
    "MAX_HEAD",
    "PROBES",
    "Probe",
    "Probed",
    "answer",
    "header_timeout_response",
    "parse_probe",
    "plain_response",
    "readiness",
]
