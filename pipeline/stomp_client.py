"""A small blocking STOMP 1.2 client for the Spark streaming source and sink.

Why STOMP and not REST: a REST manual-ack pull consumer holds one unacknowledged message at a
time, so a micro-batch could not stay unacknowledged until Spark commits it.  A STOMP
``client-individual`` subscription holds any number, acknowledges exactly the ones named, and
gives every one back to the queue the moment the connection drops (a killed driver).  The
frames come from the product's own codec (:mod:`waystation.wire.stomp`), so nothing new is
parsed here.

Two threads besides the caller's: a reader keeps draining the socket into memory (bounded by
the subscription's window), so the node keeps delivering while Spark runs a batch and the
next batch finds its messages already here; a heart-beat thread speaks when the caller has
been silent, since Spark may not call the source for minutes and the node closes a silent
connection (``connection_ttl``), which would give every unacknowledged message back.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence

from waystation.wire.stomp import Frame, StompParser, encode_frame


class StompFailure(RuntimeError):
    """The node answered ERROR, or the connection ended."""


class StompClient:
    """One connection: ``receive`` MESSAGE frames, ``ack`` them, ``send`` with receipts."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        login: str = "",
        passcode: str = "",
        timeout: float = 30,
        heartbeat: float = 10,
    ) -> None:
        self.timeout = timeout
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.messages: deque[Frame] = deque()
        self.receipts: set[str] = set()
        self.failure: StompFailure | None = None
        self._cond = threading.Condition()
        self._next_receipt = 0
        self._send_lock = threading.Lock()
        self._last_send = time.monotonic()
        self._closed = threading.Event()
        parser = StompParser()
        headers = {
            "accept-version": "1.2",
            "host": host,
            "heart-beat": f"{int(heartbeat * 1000)},0",
        }
        if login:
            headers |= {"login": login, "passcode": passcode}
        self.sock.sendall(encode_frame("CONNECT", headers))
        first: list[Frame] = []
        while not first:
            data = self.sock.recv(1 << 16)
            if not data:
                raise StompFailure(f"{host}:{port} closed the connection at CONNECT")
            first = [e for e in parser.feed(data) if isinstance(e, Frame)]
        if first[0].command != "CONNECTED":
            raise StompFailure(f"no CONNECTED from {host}:{port}: {first[0]!r}")
        parser.version = "1.2"
        self._dispatch([e for e in parser.feed(b"") if isinstance(e, Frame)])
        self.sock.settimeout(None)
        threading.Thread(target=self._read, args=(parser,), daemon=True).start()
        if heartbeat:
            threading.Thread(target=self._beat, args=(heartbeat / 2,), daemon=True).start()

    def subscribe(self, destination: str, sub_id: str, window: int) -> None:
        h = {"destination": destination, "id": sub_id, "ack": "client-individual"}
        if window:
            h["prefetch-count"] = str(window)
        self.request("SUBSCRIBE", h)

    def receive(self, wait: float) -> Frame | None:
        """The next MESSAGE, waiting at most ``wait`` seconds; None when none came."""
        with self._cond:
            self._cond.wait_for(lambda: self.messages or self.failure, wait)
            if self.messages:
                return self.messages.popleft()
            if self.failure is not None:
                raise self.failure
            return None

    def ack(self, ack_ids: list[str]) -> None:
        """Acknowledge each id; returns once the node confirmed (a receipt on the last one:
        the node answers in order and flushes a durable queue's acks before it)."""
        if not ack_ids:
            return
        self._send(b"".join(encode_frame("ACK", {"id": a}) for a in ack_ids[:-1]))
        self.request("ACK", {"id": ack_ids[-1]})

    def send_many(self, frames: Sequence[tuple[Mapping[str, str], bytes]]) -> None:
        """SEND every frame with its own receipt; return once every receipt came."""
        want: set[str] = set()
        out: list[bytes] = []
        for headers, body in frames:
            rid = self._receipt_id()
            want.add(rid)
            out.append(encode_frame("SEND", {**headers, "receipt": rid}, body))
        self._send(b"".join(out))
        self._await(want)

    def request(self, command: str, headers: Mapping[str, str], body: bytes = b"") -> None:
        """Send one frame with a receipt and wait for it."""
        rid = self._receipt_id()
        self._send(encode_frame(command, {**headers, "receipt": rid}, body))
        self._await({rid})

    def close(self) -> None:
        self._closed.set()
        try:
            self._send(encode_frame("DISCONNECT", {}))
        except (OSError, StompFailure):
            pass  # already gone: nothing to say goodbye to
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader thread
        except OSError:
            pass
        self.sock.close()

    # -- internals ---------------------------------------------------------------------------
    def _receipt_id(self) -> str:
        self._next_receipt += 1
        return f"r{self._next_receipt}"

    def _await(self, want: set[str]) -> None:
        with self._cond:
            done = self._cond.wait_for(lambda: want <= self.receipts or self.failure, self.timeout)
            if self.failure is not None and not want <= self.receipts:
                raise self.failure
            if not done:
                raise StompFailure(f"no receipt within {self.timeout} s")
            self.receipts -= want

    def _send(self, data: bytes) -> None:
        if self.failure is not None:
            raise self.failure
        with self._send_lock:  # whole frames: the heart-beat thread writes too
            self.sock.sendall(data)
            self._last_send = time.monotonic()

    def _beat(self, every: float) -> None:
        while not self._closed.wait(every / 2):
            if time.monotonic() - self._last_send >= every:
                try:
                    self._send(b"\n")
                except (OSError, StompFailure):
                    return  # the reader reports why

    def _read(self, parser: StompParser) -> None:
        try:
            while True:
                data = self.sock.recv(1 << 18)
                if not data:
                    raise StompFailure("connection closed by the node")
                self._dispatch([e for e in parser.feed(data) if isinstance(e, Frame)])
        except (OSError, StompFailure) as e:
            why = e if isinstance(e, StompFailure) else StompFailure(f"connection lost: {e}")
            with self._cond:
                self.failure = self.failure or why
                self._cond.notify_all()

    def _dispatch(self, frames: list[Frame]) -> None:
        if not frames:
            return
        with self._cond:
            for f in frames:
                if f.command == "MESSAGE":
                    self.messages.append(f)
                elif f.command == "RECEIPT":
                    self.receipts.add(f.headers.get("receipt-id", ""))
                elif f.command == "ERROR":
                    detail = f.body.decode("utf-8", "replace")[:500]
                    msg = f"ERROR from node: {f.headers.get('message')} {detail}"
                    self.failure = self.failure or StompFailure(msg)
            self._cond.notify_all()
