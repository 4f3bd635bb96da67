"""An outbound STOMP connection: the sans-I/O codec over asyncio streams, with heart-beats
and a liveness check.

``StompLink.open`` dials (tcp, tls, ws, wss or the http/https tunnel; directly or through an
HTTP proxy), sends CONNECT and returns once CONNECTED arrived.  After that every frame from
the remote goes to ``on_frame``, writes made in one loop turn leave in one batch, and
``closed`` resolves with the reason when the link ends for any cause: EOF, a socket error, a
protocol error, or silence.

Liveness: a path that black-holes packets gives no RST, so the link watches its input.  If
nothing (no frame, no heart-beat) arrives for ``liveness`` seconds it closes itself.  Remote
heart-beats are requested at ``heartbeat``, but a server may insist on a slower rate, so
after ``liveness / 3`` of silence the link also sends a probe that any STOMP server answers:
``BEGIN`` + ``ABORT`` of a throw-away transaction with a receipt.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
import time
from collections.abc import Callable

from waystation.bridges.dial import READ_CHUNK, Target, dial
from waystation.bridges.link import (
    Confirmed,
    ConnectRefused,
    LinkOptions,
    Refused,
    _ignore_confirmed,
    _ignore_refused,
)
from waystation.bridges.outgoing import send_frame
from waystation.bridges.reasons import classify_error
from waystation.core.message import Message
from waystation.gateway.stomp.mapping import NODE_HEADER, REVERSE_HEADER
from waystation.wire.stomp import (
    HEARTBEAT_BYTES,
    Frame,
    StompError,
    StompParser,
    encode_frame,
)

log = logging.getLogger("waystation.bridge.link")

PROBE_PREFIX = "ws-probe-"
REVERSE_ID = "ws-link"  # the subscription id and receipt of a two-way link's SUBSCRIBE
FLUSH_AT = 64 * 1024


class StompLink:
    """One connected STOMP session as a client.  Create it with :meth:`open`."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        parser: StompParser,
        options: LinkOptions,
        target: Target,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.parser = parser
        self.options = options
        self.target = target
        self.version = "1.2"
        self.server = ""
        # a bridge's answers (BridgeLink); a consumer of the remote replaces on_frame
        self.on_confirmed: Confirmed = _ignore_confirmed
        self.on_refused: Refused = _ignore_refused
        self.on_frame: Callable[[Frame], None] = self._bridge_frame
        self.on_message: Callable[[Frame], None] | None = None  # a two-way link's MESSAGEs
        self.closed: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._send_every = 0.0
        self._last_rx = time.monotonic()
        self._last_tx = time.monotonic()
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self._probe_seq = itertools.count(1)
        self._probe_sent = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        self._ended = False

    # -- opening --------------------------------------------------------------------------
    @classmethod
    async def open(cls, target: Target, options: LinkOptions) -> StompLink:
        """Dial, CONNECT and wait for CONNECTED, all within ``options.connect_timeout``.

        Raises OSError (and TimeoutError) when the remote cannot be reached, ConnectRefused
        when it answers with ERROR (bad credentials, for instance)."""
        async with asyncio.timeout(options.connect_timeout or None):
            reader, writer = await dial(target, options.liveness or options.connect_timeout or 30.0)
            try:
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                parser = StompParser(options.limits)
                link = cls(reader, writer, parser, options, target)
                pending = await link._handshake()
            except BaseException:
                writer.close()
                raise
        link._start(pending)
        return link

    async def _handshake(self) -> list[Frame]:
        opts = self.options
        hb = int(opts.heartbeat * 1000)
        headers = {
            "accept-version": "1.2,1.1",
            "host": self.target.host,
            "heart-beat": f"{hb},{hb}",
        }
        if opts.login is not None:
            headers["login"] = opts.login
            headers["passcode"] = opts.passcode or ""
        if opts.client_id:
            headers["client-id"] = opts.client_id
        if opts.node:
            headers[NODE_HEADER] = opts.node
        self.writer.write(encode_frame("CONNECT", headers, b"", "1.2"))
        while True:
            data = await self.reader.read(READ_CHUNK)
            if not data:
                raise ConnectionResetError("remote closed the connection during CONNECT")
            try:
                events = self.parser.feed(data)
            except StompError as e:
                raise ConnectionError(f"protocol error from remote: {e.message}") from None
            frames = [e for e in events if isinstance(e, Frame)]
            if not frames:
                continue
            first = frames[0]
            if first.command == "ERROR":
                raise ConnectRefused(
                    first.headers.get("message", "connection refused"),
                    first.body.decode("utf-8", "replace")[:500],
                )
            if first.command != "CONNECTED":
                raise ConnectionError(f"expected CONNECTED, got {first.command}")
            remote = first.headers.get(NODE_HEADER)
            if opts.expect_node is not None and remote != opts.expect_node:
                is_ = f"is node {remote!r}" if remote else "names no node"
                raise ConnectRefused(
                    f"wrong node: {self.target} {is_}, this bridge is to {opts.expect_node!r}",
                    "check the bridge's url and remote_node",
                )
            self._connected(first.headers)
            rest = frames[1:]
            try:
                rest += [e for e in self.parser.feed(b"") if isinstance(e, Frame)]
            except StompError as e:
                raise ConnectionError(f"protocol error from remote: {e.message}") from None
            return rest

    def _connected(self, h: dict[str, str]) -> None:
        version = h.get("version", "1.0")
        self.version = version if version in ("1.1", "1.2") else "1.0"
        self.parser.version = self.version
        self.server = h.get("server", "")
        if self.version == "1.0":
            return
        try:
            _, sy = (int(x) for x in h.get("heart-beat", "0,0").split(","))
        except ValueError:
            sy = 0
        cx = int(self.options.heartbeat * 1000)
        # we send every max(cx, sy) when both want it (the STOMP 1.1 negotiation)
        self._send_every = max(cx, sy) / 1000.0 if cx and sy else 0.0

    def _start(self, pending: list[Frame]) -> None:
        now = time.monotonic()
        self._last_rx = self._last_tx = now
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._read_loop(pending)), loop.create_task(self._tick())]

    # -- input ----------------------------------------------------------------------------
    async def _read_loop(self, pending: list[Frame]) -> None:
        await asyncio.sleep(0)  # let the opener install on_frame first
        try:
            for f in pending:
                self._dispatch(f)
            while not self._ended:
                data = await self.reader.read(READ_CHUNK)
                if not data:
                    self.close("connection closed by the remote")
                    return
                self._last_rx = time.monotonic()
                for ev in self.parser.feed(data):
                    if isinstance(ev, Frame):
                        self._dispatch(ev)
                        if self._ended:
                            return
        except StompError as e:
            self.close(f"protocol error from remote: {e.message}")
        except (OSError, EOFError) as e:
            self.close(
                f"connection lost: {e}" if str(e) else f"connection lost ({type(e).__name__})"
            )
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bug in a frame handler must still end the link cleanly
            log.exception("link %s: frame handling failed", self.target)
            self.close(f"internal error: {e!r}")

    def _dispatch(self, frame: Frame) -> None:
        if frame.command == "RECEIPT" and frame.headers.get("receipt-id", "").startswith(
            PROBE_PREFIX
        ):
            self._probe_sent = 0.0
            return
        self.on_frame(frame)

    # -- timers ---------------------------------------------------------------------------
    async def _tick(self) -> None:
        liveness = self.options.liveness
        steps = [x for x in (self._send_every / 2, liveness / 4) if x > 0]
        period = max(0.02, min(steps)) if steps else 1.0
        while not self._ended:
            await asyncio.sleep(period)
            now = time.monotonic()
            silent = now - self._last_rx
            if liveness and silent > liveness:
                self.close(f"nothing received for {silent:.1f}s (liveness timeout {liveness:g}s)")
                return
            if liveness and silent > liveness / 3 and not self._probe_sent:
                self._probe()
                self._probe_sent = now
            if self._send_every and now - self._last_tx >= self._send_every * 0.9:
                self.write(HEARTBEAT_BYTES)

    def _probe(self) -> None:
        tx = f"{PROBE_PREFIX}{next(self._probe_seq)}"
        self.send_frame("BEGIN", {"transaction": tx})
        self.send_frame("ABORT", {"transaction": tx, "receipt": tx})

    # -- BridgeLink: SEND with a receipt; RECEIPT confirms, ERROR refuses ------------------
    @property
    def encoding(self) -> str:
        return f"stomp{self.version}"

    refusal_ends_link = True  # a STOMP server closes the connection after an ERROR

    def encode(
        self,
        msg: Message,
        confirm_id: str,
        forwarding_address: str | None,
        duplicate_id: str | None,
    ) -> bytes:
        return send_frame(msg, confirm_id, forwarding_address, duplicate_id, self.version)

    def forward(self, confirm_id: str, payload: bytes) -> None:
        self.write(payload)

    def _bridge_frame(self, frame: Frame) -> None:
        if frame.command == "RECEIPT":
            self.on_confirmed(frame.headers.get("receipt-id", ""))
        elif frame.command == "MESSAGE" and self.on_message is not None:
            self.on_message(frame)
        elif frame.command == "ERROR":
            text = error_text(frame)
            rid = frame.headers.get("receipt-id") or None
            if rid == REVERSE_ID:
                self.close(f"the remote refused to send traffic back: {text}")
                return
            self.on_refused(rid, text, classify_error(text))

    def open_reverse(self, on_message: Callable[[Frame], None]) -> None:
        """Ask the remote node to send its store-and-forward traffic for this node back over
        this link (``direction = "both"``); each MESSAGE goes to ``on_message``."""
        self.on_message = on_message
        self.send_frame(
            "SUBSCRIBE",
            {
                "id": REVERSE_ID,
                "destination": REVERSE_ID,
                "ack": "client-individual",
                REVERSE_HEADER: "back",
                "receipt": REVERSE_ID,
            },
        )

    # -- output ---------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if self._ended:
            return
        self._out.append(data)
        self._out_bytes += len(data)
        self._last_tx = time.monotonic()
        if self._out_bytes >= FLUSH_AT:
            self._flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def send_frame(self, command: str, headers: dict[str, str], body: bytes = b"") -> None:
        self.write(encode_frame(command, headers, body, self.version))

    def _flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        if not out or self._ended:
            return
        self._out = []
        self._out_bytes = 0
        try:
            self.writer.write(b"".join(out) if len(out) > 1 else out[0])
        except (OSError, RuntimeError) as e:
            self.close(f"write failed: {e}")

    def write_buffer_size(self) -> int:
        transport = self.writer.transport
        return self._out_bytes + (
            0 if transport.is_closing() else transport.get_write_buffer_size()
        )

    async def drain(self) -> None:
        """Wait until the socket's write buffer is below its high-water mark."""
        self._flush()
        with contextlib.suppress(OSError, RuntimeError):
            await self.writer.drain()

    # -- closing --------------------------------------------------------------------------
    def close(self, reason: str = "closed") -> None:
        """End the link (idempotent); ``closed`` resolves with the first reason given."""
        if self._ended:
            return
        self._flush()
        self._ended = True
        if not self.closed.done():  # (a waiter cancelled it)
            self.closed.set_result(reason)
        with contextlib.suppress(Exception):
            self.writer.close()
        current = asyncio.current_task()
        for t in self._tasks:
            if t is not current:
                t.cancel()

    async def wait_closed(self, grace: float = 1.0) -> None:
        """Wait for the link's tasks and socket to finish; a peer that does not take the last
        bytes within ``grace`` seconds gets a reset instead."""
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        try:
            await asyncio.wait_for(self.writer.wait_closed(), grace)
        except Exception:
            self.writer.transport.abort()


def error_text(frame: Frame) -> str:
    """What a remote ERROR frame says: its ``message`` header, else the start of its body."""
    return frame.headers.get("message") or frame.body.decode("utf-8", "replace")[:500] or "ERROR"


__all__ = ["ConnectRefused", "LinkOptions", "StompLink", "error_text"]
