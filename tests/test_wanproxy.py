"""Tests for the fault-injecting WAN proxy used by the bridge tests."""

from __future__ import annotations

import contextlib
import os
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from wanproxy import WanProxy

pytestmark = pytest.mark.timeout(60)


# ------------------------------------------------------------------ helpers


@dataclass
class Echo:
    port: int
    accepted: list[int]


class _EchoHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        assert isinstance(self.server, _EchoServer)
        self.server.accepted[0] += 1
        sock: socket.socket = self.request
        sock.settimeout(20)
        with contextlib.suppress(OSError):
            for _ in range(1_000_000):
                data = sock.recv(65536)
                if not data:
                    break
                sock.sendall(data)


class _EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _EchoHandler)
        self.accepted = [0]


@pytest.fixture
def echo() -> Iterator[Echo]:
    server = _EchoServer()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield Echo(int(server.server_address[1]), server.accepted)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def proxy(echo: Echo) -> Iterator[WanProxy]:
    with WanProxy(echo.port) as p:
        yield p


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_exact(s: socket.socket, n: int, timeout: float = 5.0) -> bytes:
    deadline = time.monotonic() + timeout
    buf = bytearray()
    while len(buf) < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"got {len(buf)} of {n} bytes")
        s.settimeout(remaining)
        chunk = s.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError(f"EOF after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def roundtrip(s: socket.socket, payload: bytes, timeout: float = 5.0) -> bytes:
    s.sendall(payload)
    return recv_exact(s, len(payload), timeout)


def timed_roundtrip(s: socket.socket, payload: bytes = b"ping") -> float:
    t0 = time.monotonic()
    assert roundtrip(s, payload) == payload
    return time.monotonic() - t0


def closed_by_peer(s: socket.socket, timeout: float = 2.0) -> bool:
    """True if the peer reset or closed the connection within ``timeout`` (data is skipped)."""
    deadline = time.monotonic() + timeout
    for _ in range(10_000):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        s.settimeout(remaining)
        try:
            if not s.recv(65536):
                return True
        except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
    return False


def silent(s: socket.socket, for_s: float = 0.4) -> bool:
    """True if nothing at all (no data, no EOF, no reset) arrives for ``for_s`` seconds."""
    s.settimeout(for_s)
    try:
        s.recv(65536)
    except TimeoutError:
        return True
    except OSError:
        return False
    return False


def bulk_echo(s: socket.socket, payload: bytes, timeout: float = 10.0) -> tuple[bytes, float]:
    """Send ``payload`` from a thread while reading the echo; return (echo, seconds)."""
    errors: list[BaseException] = []

    def send() -> None:
        try:
            s.sendall(payload)
        except BaseException as exc:  # reported below
            errors.append(exc)

    t0 = time.monotonic()
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    data = recv_exact(s, len(payload), timeout)
    elapsed = time.monotonic() - t0
    sender.join(timeout)
    assert not errors, errors
    return data, elapsed


def wait_for(pred: Callable[[], bool], timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -------------------------------------------------------------------- tests


def test_round_trip_and_half_close_propagates_after_data(proxy: WanProxy) -> None:
    payload = os.urandom(300_000)
    with connect(proxy.port) as s:
        assert roundtrip(s, b"hello") == b"hello"
        data, _ = bulk_echo(s, payload)
        assert data == payload
        # With latency, the FIN must still arrive behind the data it follows.
        proxy.set_latency(0.03)
        s.sendall(b"last words")
        s.shutdown(socket.SHUT_WR)
        assert recv_exact(s, 10) == b"last words"
        assert closed_by_peer(s)
    assert wait_for(lambda: proxy.stats()["connections_open"] == 0)


def test_latency_applies_both_ways_and_can_change(proxy: WanProxy) -> None:
    with connect(proxy.port) as s:
        assert timed_roundtrip(s) < 0.05
        proxy.set_latency(0.05)
        rtts = [timed_roundtrip(s) for _ in range(3)]
        assert min(rtts) >= 0.099, rtts  # 2 x one-way
        assert max(rtts) < 0.35, rtts
        proxy.set_latency(0.0)
        assert timed_roundtrip(s) < 0.05


def test_jitter_varies_delay_within_bounds(proxy: WanProxy) -> None:
    proxy.set_latency(0.01, jitter_s=0.04)
    with connect(proxy.port) as s:
        rtts = [timed_roundtrip(s) for _ in range(12)]
    assert min(rtts) >= 0.0199, rtts
    assert max(rtts) < 0.10 + 0.15, rtts
    assert max(rtts) - min(rtts) > 0.01, rtts


def test_jitter_never_reorders_a_numbered_stream(proxy: WanProxy) -> None:
    proxy.set_latency(0.002, jitter_s=0.03)
    n, burst = 4000, 40
    with connect(proxy.port) as s:

        def write() -> None:
            for i in range(0, n, burst):
                s.sendall(b"".join(struct.pack(">I", j) for j in range(i, i + burst)))
                time.sleep(0.001)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        data = recv_exact(s, 4 * n, timeout=15)
        writer.join(5)
    assert list(struct.unpack(f">{n}I", data)) == list(range(n))


def test_bandwidth_cap_limits_throughput_and_can_be_lifted(proxy: WanProxy) -> None:
    rate, size = 200_000, 160_000
    proxy.set_bandwidth(rate)
    payload = os.urandom(size)
    with connect(proxy.port) as s:
        data, elapsed = bulk_echo(s, payload)
        assert data == payload
        throughput = size / elapsed
        assert 0.7 * rate <= throughput <= 1.3 * rate, (throughput, elapsed)
        proxy.set_bandwidth(None)
        big = os.urandom(2_000_000)  # 10 s at the old cap
        data, elapsed = bulk_echo(s, big)
        assert data == big
        assert elapsed < 2.0, elapsed


def test_slow_receiver_is_back_pressured_not_buffered() -> None:
    """A target that does not read stalls the sender; the proxy holds at most ~max_buffer."""
    cap = 256 * 1024
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    start_reading = threading.Event()
    received = [0]

    def sink() -> None:
        listener.settimeout(10)
        conn, _ = listener.accept()
        accepted.append(conn)
        conn.settimeout(20)
        start_reading.wait(20)
        with contextlib.suppress(OSError):
            for _ in range(1_000_000):
                data = conn.recv(1 << 20)
                if not data:
                    break
                received[0] += len(data)
        conn.close()

    sink_thread = threading.Thread(target=sink, daemon=True)
    sink_thread.start()
    try:
        with WanProxy(listener.getsockname()[1], max_buffer=cap) as p, connect(p.port) as s:
            s.setblocking(False)
            chunk = b"x" * 65536
            sent, last_progress = 0, time.monotonic()
            deadline = last_progress + 10
            while time.monotonic() < deadline and sent < 256 * 1024 * 1024:
                try:
                    sent += s.send(chunk)
                    last_progress = time.monotonic()
                except BlockingIOError:
                    if time.monotonic() - last_progress > 0.5:
                        break
                    time.sleep(0.01)
            assert time.monotonic() - last_progress > 0.5, f"never stalled after {sent} bytes"
            assert sent < 64 * 1024 * 1024
            buffered = p.stats()["bytes_buffered"]
            # Reading stops at cap and resumes below cap/2 (hysteresis).
            assert cap // 2 < buffered <= cap + 64 * 1024, buffered
            # Once the target reads again, everything arrives, then the EOF.
            start_reading.set()
            s.setblocking(True)
            s.shutdown(socket.SHUT_WR)
            sink_thread.join(20)
            assert not sink_thread.is_alive()
            assert received[0] == sent
            assert p.stats()["bytes_up"] == sent
            assert wait_for(lambda: p.stats()["bytes_buffered"] == 0)
    finally:
        start_reading.set()
        listener.close()
        for conn in accepted:
            conn.close()


def test_cut_resets_connections_and_new_ones_work(proxy: WanProxy) -> None:
    socks = [connect(proxy.port) for _ in range(3)]
    try:
        for s in socks:
            assert roundtrip(s, b"hi") == b"hi"
        assert proxy.cut() == 3
        for s in socks:
            assert closed_by_peer(s)
    finally:
        for s in socks:
            s.close()
    stats = proxy.stats()
    assert stats["cuts"] == 1
    assert stats["connections_cut"] == 3
    assert wait_for(lambda: proxy.stats()["connections_open"] == 0)
    with connect(proxy.port) as s:
        assert roundtrip(s, b"after the cut") == b"after the cut"
    proxy.cut()  # counted even when nothing is open
    assert proxy.stats()["cuts"] == 2


def test_blackhole_is_silent_and_path_comes_back(proxy: WanProxy, echo: Echo) -> None:
    a = connect(proxy.port)  # will lose bytes in the black hole
    c = connect(proxy.port)  # stays idle during the black hole
    try:
        assert roundtrip(a, b"before") == b"before"
        assert roundtrip(c, b"before") == b"before"
        seen_by_target = echo.accepted[0]
        delivered_up = proxy.stats()["bytes_up"]
        proxy.set_latency(0.2)
        a.sendall(b"in flight")  # queued when the hole opens: must vanish too
        assert wait_for(lambda: proxy.stats()["bytes_buffered"] == len(b"in flight"), 0.15)
        proxy.blackhole(True)
        proxy.set_latency(0.0)
        a.sendall(b"lost")
        assert silent(a, 0.5)  # nothing arrives, and no EOF or reset either
        with connect(proxy.port) as b:  # new connection: accepted, but silent
            b.sendall(b"anyone?")
            assert silent(b)
            assert echo.accepted[0] == seen_by_target  # the target never saw it
            assert proxy.stats()["bytes_dropped"] >= len(b"in flightlostanyone?")
            assert proxy.stats()["bytes_up"] == delivered_up  # not even the queued bytes
            assert proxy.stats()["connections_open"] == 3
            proxy.blackhole(False)
            # Connections that lost bytes cannot continue intact: they are reset.
            assert closed_by_peer(a)
            assert closed_by_peer(b)
        # The idle one carries on, and new connections work.
        assert roundtrip(c, b"still here") == b"still here"
        with connect(proxy.port) as d:
            assert roundtrip(d, b"back") == b"back"
    finally:
        a.close()
        c.close()


def test_refuse_resets_new_connections_only(proxy: WanProxy) -> None:
    with connect(proxy.port) as old:
        assert roundtrip(old, b"x") == b"x"
        proxy.refuse(True)
        t0 = time.monotonic()
        try:
            with connect(proxy.port) as s:
                assert closed_by_peer(s, timeout=1.0)
        except ConnectionError:
            pass  # refused before connect() returned: also fine
        assert time.monotonic() - t0 < 1.0
        assert roundtrip(old, b"still fine") == b"still fine"
        proxy.refuse(False)
        with connect(proxy.port) as s:
            assert roundtrip(s, b"welcome") == b"welcome"
    stats = proxy.stats()
    assert stats["refused"] == 1
    assert stats["connections_total"] == 2


def test_target_down_closes_client() -> None:
    with WanProxy(closed_port()) as p, connect(p.port) as s:
        assert closed_by_peer(s, timeout=3.0)
        assert wait_for(lambda: p.stats()["target_failures"] == 1)
        assert wait_for(lambda: p.stats()["connections_open"] == 0)


def test_stats_count_connections_and_bytes(proxy: WanProxy) -> None:
    with connect(proxy.port) as s1:
        roundtrip(s1, b"a" * 1000)
        roundtrip(s1, b"b" * 500)
        with connect(proxy.port) as s2:
            roundtrip(s2, b"c" * 250)
            stats = proxy.stats()
            assert stats["connections_total"] == 2
            assert stats["connections_open"] == 2
    assert wait_for(lambda: proxy.stats()["connections_open"] == 0)
    stats = proxy.stats()
    assert stats["bytes_up"] == 1750
    assert stats["bytes_down"] == 1750
    assert stats["bytes_buffered"] == 0
    assert stats["cuts"] == stats["refused"] == stats["bytes_dropped"] == 0


def test_stop_resets_clients_and_releases_port(echo: Echo) -> None:
    p = WanProxy(echo.port).start()
    port = p.port
    assert port > 0
    thread = p._thread
    s = connect(port)
    try:
        assert roundtrip(s, b"x") == b"x"
        p.stop()
        assert closed_by_peer(s)
    finally:
        s.close()
    assert thread is not None and not thread.is_alive()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    p.stop()  # idempotent
    assert p.cut() == 0
    assert p.stats()["connections_open"] == 0


def test_invalid_settings_rejected() -> None:
    p = WanProxy(1)
    with pytest.raises(ValueError):
        p.set_latency(-0.1)
    with pytest.raises(ValueError):
        p.set_latency(0.1, jitter_s=-1)
    with pytest.raises(ValueError):
        p.set_bandwidth(0)
