"""The pieces of a node fuzzer: the node (security on), cases (a byte stream over one
connection, ended by a FIN, a silence or a reset) sent over many connections at once, the
bystander that must keep being answered, and hypothesis used as a generator.  campaign.py
puts them together."""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hseed
from hypothesis import strategies as st
from nodekit import SECURITY_USERS, NodeProcess

from waystation.wire.stomp import Frame, StompParser, encode_frame

T = TypeVar("T")

ANSWER_SECONDS = 5.0  # bystander round trip and probe, after each batch, on a loaded CI box
CASE_SECONDS = 4.0  # one case: after our FIN the node must have closed within this
IDLE_SECONDS = 0.15  # "idle" cases: the node has nothing more to say after this long
IDLE_LIMIT = 1.0  # ... or it keeps talking (heart-beats the case asked for): closed then
USER, PASSWORD = "fuzz", "fuzzpw"  # what fuzz cases log in as (role rw, see CONFIG)
BYSTANDER = ("app", "secret")  # another user: per-user quotas the fuzz uses up are not its

# Security on, with the users of nodekit.SECURITY_USERS plus "fuzz".  The login throttle
# is opened wide: it has its own tests, and here it would turn every fuzz case after a
# mangled password into a 1 s refusal.  Every address keeps at most 64 KiB (DROP beyond), and
# MQTT sessions left by fuzz cases expire at once, so what the fuzz stores cannot pass for
# a leak; the tunnel answers polls quickly.
CONFIG = (
    SECURITY_USERS
    + f"""
[[users]]
name = "{USER}"
password = "{PASSWORD}"
roles = ["rw"]

[security.login]
free_failures = 1000000000
free_failures_per_user = 1000000000

[address_settings."#"]
max_size_bytes = "64KiB"
full_policy = "DROP"
"""
)
HTTP = """
[acceptors.http.rest]
push_allow = ["127.0.0.0/8"]
[acceptors.http.tunnel]
response_time = "0.3s"
session_timeout = "2s"
max_sessions_per_address = 1000
[acceptors.http.sockjs]
max_sessions_per_address = 1000
"""
MQTT = 'max_session_expiry = "0s"'


class FuzzNode(NodeProcess):
    """A node with STOMP, MQTT, AMQP and HTTP listeners and security on (see CONFIG)."""

    def __init__(self, workdir: Path, extra_config: str = "", **kw: Any) -> None:
        kw.setdefault("http", HTTP)
        kw.setdefault("mqtt", MQTT)
        kw.setdefault("amqp", True)
        super().__init__(workdir, CONFIG + extra_config, **kw)

    def start(self) -> FuzzNode:
        super().start()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS in /proc/<pid>/status")

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))


# -- cases: a byte stream over one connection ---------------------------------------------
@dataclass(slots=True)
class Case:
    """Chunks written ``pause`` seconds apart, then ``end``: "fin" half-closes and reads until
    the node closes, "idle" reads until the node is quiet and closes, "reset" aborts at
    once (a TCP reset).  ``upgrade``: the first chunk is an HTTP upgrade request, whose
    answer's head is read before the rest is written (as RFC 6455 4.1 asks of clients)."""

    chunks: list[bytes]
    end: str = "fin"
    pause: float = 0.0
    upgrade: bool = False


Batch = list[Callable[[], Awaitable[None]]]  # jobs run with bounded concurrency
BATCH = 100  # cases between two bystander round trips


@dataclass
class Tally:
    """What happened to the cases of a run."""

    cases: int = 0
    bytes_sent: int = 0
    closed_by_node: int = 0
    quiet: int = 0  # "idle" cases the node kept open (waiting for more input)
    reset: int = 0
    refused: int = 0  # the connection itself failed (reset by the node while we wrote)
    held: list[str] = field(default_factory=list)  # FIN sent, node did not close in time
    seconds: dict[str, float] = field(default_factory=dict)  # case time by ending
    statuses: dict[int, int] = field(default_factory=dict)  # HTTP answers by status

    def status(self, code: int) -> None:
        self.statuses[code] = self.statuses.get(code, 0) + 1


async def _read_to_eof(reader: asyncio.StreamReader, seconds: float) -> bool:
    """Drain until EOF (True) or ``seconds`` passed (False)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            if not await asyncio.wait_for(reader.read(65536), left):
                return True
        except TimeoutError:
            return False
    return False


async def _read_until_quiet(reader: asyncio.StreamReader) -> bool:
    """Drain until EOF (True), or nothing came for IDLE_SECONDS, or IDLE_LIMIT (False)."""
    deadline = time.monotonic() + IDLE_LIMIT
    while time.monotonic() < deadline:
        try:
            if not await asyncio.wait_for(reader.read(65536), IDLE_SECONDS):
                return True
        except TimeoutError:
            return False
    return False


async def send_case(port: int, case: Case, tally: Tally, count: bool = True) -> None:
    """One case over a fresh TCP connection to ``port`` (``count``: as a case of its own)."""
    tally.cases += count
    t0 = time.monotonic()
    try:
        await _send_case(port, case, tally)
    finally:
        tally.seconds[case.end] = tally.seconds.get(case.end, 0.0) + time.monotonic() - t0


async def _send_case(port: int, case: Case, tally: Tally) -> None:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        tally.refused += 1
        return
    try:
        for i, chunk in enumerate(case.chunks):
            if i and case.pause:
                await asyncio.sleep(case.pause)
            writer.write(chunk)
            tally.bytes_sent += len(chunk)
            await writer.drain()
            if i == 0 and case.upgrade:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), CASE_SECONDS)
                tally.status(int(head.split(b" ", 2)[1]))
        if case.end == "reset":
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
            writer.transport.abort()
            tally.reset += 1
            return
        if case.end == "fin":
            writer.write_eof()
            if await _read_to_eof(reader, CASE_SECONDS):
                tally.closed_by_node += 1
            else:
                tally.held.append(repr(b"".join(case.chunks)[:200]))
        elif await _read_until_quiet(reader):
            tally.closed_by_node += 1
        else:
            tally.quiet += 1
    except (ConnectionError, OSError, asyncio.IncompleteReadError):
        tally.refused += 1  # the node closed on us mid-write: a refusal, not a failure
    finally:
        writer.transport.abort()


async def bounded(jobs: Iterable[Callable[[], Awaitable[None]]], concurrency: int) -> None:
    """Run ``jobs`` with at most ``concurrency`` at once; the first error propagates."""
    it = iter(jobs)

    async def worker() -> None:
        for job in it:  # one shared iterator: each job is taken by exactly one worker
            await job()

    await asyncio.gather(*(worker() for _ in range(concurrency)))


def streams(port: int, cases: Sequence[Case], tally: Tally) -> Batch:
    """Jobs for :func:`bounded`: each case over its own connection to ``port``."""
    return [lambda c=c: send_case(port, c, tally) for c in cases]  # type: ignore[misc]


# -- the bystander: a STOMP client connected through the whole run -------------------------
class Bystander:
    """Logged in before the fuzz starts, subscribed to its own queue; each round trip sends
    a message and waits for it to come back."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.queue = f"/queue/fz.bystander.{uuid.uuid4().hex[:8]}"
        self.frames: asyncio.Queue[Frame | None] = asyncio.Queue()
        self.parser = StompParser()
        self.times: list[float] = []
        self.n = 0

    async def __aenter__(self) -> Bystander:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.task = asyncio.ensure_future(self._read())
        login, passcode = BYSTANDER
        self._send("CONNECT", {"accept-version": "1.2", "host": "localhost", "login": login,
                               "passcode": passcode})  # fmt: skip
        f = await self._next()
        assert f.command == "CONNECTED", f
        self.parser.version = "1.2"
        self._send("SUBSCRIBE", {"id": "b", "destination": self.queue, "receipt": "s"})
        f = await self._next()
        assert f.command == "RECEIPT", f
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.writer.transport.abort()
        self.task.cancel()

    def _send(self, command: str, headers: dict[str, str], body: bytes = b"") -> None:
        self.writer.write(encode_frame(command, headers, body))

    async def _read(self) -> None:
        try:
            while data := await self.reader.read(65536):
                # feed(b"") parses what waited behind a CONNECTED (see wire/stomp.py)
                for e in self.parser.feed(data) + self.parser.feed(b""):
                    if isinstance(e, Frame):
                        self.frames.put_nowait(e)
        finally:
            self.frames.put_nowait(None)

    async def _next(self) -> Frame:
        f = await asyncio.wait_for(self.frames.get(), ANSWER_SECONDS)
        assert f is not None, "the node closed the bystander's connection"
        return f

    async def round_trip(self) -> float:
        """Seconds from SEND to its MESSAGE; AssertionError beyond ANSWER_SECONDS."""
        self.n += 1
        body = f"ping {self.n}".encode()
        t0 = time.monotonic()
        self._send("SEND", {"destination": self.queue}, body)
        while True:
            try:
                f = await self._next()
            except TimeoutError:
                raise AssertionError(
                    f"bystander: no answer within {ANSWER_SECONDS}s (round trip {self.n})"
                ) from None
            if f.command == "MESSAGE" and f.body == body:
                break
            assert f.command == "MESSAGE", f"bystander got {f}"
        took = time.monotonic() - t0
        self.times.append(took)
        return took


# -- structure-aware generation: hypothesis draws, collected for batch sending -----------
def draw(strategy: st.SearchStrategy[T], n: int, seed: int) -> list[T]:
    """``n`` examples of ``strategy`` (fewer if it has fewer), reproducibly from ``seed``.

    The fuzz properties hold per batch (the node stays up, answers, frees memory), not per
    example, so hypothesis only generates here; a failing batch is replayed by its seed.
    """
    out: list[T] = []

    @hseed(seed)
    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(strategy)
    def collect(x: T) -> None:
        out.append(x)

    collect()
    return out


def pool(cases: int) -> int:
    """How many structures to draw for ``cases`` (hypothesis takes 1-3 ms per example; the
    mutations make the rest of the variety)."""
    return max(100, min(3000, cases // 8))


LONG = [pytest.mark.slow, pytest.mark.fuzz, pytest.mark.timeout(3 * 3600)]  # -m slow, -m fuzz


def budget(default: int, long: int) -> Any:
    """``cases`` for a node fuzzer: the bounded default run, and the long one (LONG)."""
    return pytest.mark.parametrize(
        "cases", [pytest.param(default, id="quick"), pytest.param(long, id="long", marks=LONG)]
    )
