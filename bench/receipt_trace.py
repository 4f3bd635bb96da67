#!/usr/bin/env python3
"""Where one persistent SEND's round trip goes: a timestamped node and a one-producer client.

Starts ``waystation run`` (embedded defaults, data in a temp dir; ``--data-dir`` puts it on
another disk, e.g. /dev/shm to take the disk out) with perf_counter_ns stamps at the
boundaries of the receipt path, drives it with one synchronous raw-socket producer
(SEND persistent + receipt, wait, repeat) and prints the median of each segment.  Both
processes read CLOCK_MONOTONIC, so client and server stamps line up.  The stamps cost a
few microseconds per segment: compare runs with each other, not with untraced figures.

  python bench/receipt_trace.py --n 3000
  python bench/receipt_trace.py --n 3000 --data-dir /dev/shm
"""

from __future__ import annotations

import argparse
import atexit
import bisect
import functools
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"

# (segment, from stamp, to stamp); "c_send"/"c_recv" are the client's
SEGMENTS = (
    ("client send -> server data_received (wake-up, read)", "c_send", "recv"),
    ("parse (StompParser.feed)", "parse", "parsed"),
    ("session + routing, up to journal.write", "parsed", "jw"),
    ("journal.write (encode, CRC, hand-off)", "jw", "jw_end"),
    ("rest of data_received", "jw_end", "recv_end"),
    ("end of data_received -> write starts (loop turn or thread wake-up)", "recv_end", "pwrite"),
    ("pwritev", "pwrite", "sync"),
    ("fdatasync", "sync", "sync_end"),
    ("fsync done -> RECEIPT encoded and queued (settle, callbacks)", "sync_end", "reply"),
    ("RECEIPT queued -> transport write starts (loop turn)", "reply", "flush"),
    ("transport write -> client has it (syscall, wake-up)", "flush", "c_recv"),
    ("server total (data_received -> transport write)", "recv", "flush"),
    ("round trip (client)", "c_send", "c_recv"),
)


def _node(trace_path: str) -> int:
    """The node, with stamps; writes them to ``trace_path`` when it exits."""
    from time import perf_counter_ns as now

    stamps: list[tuple[str, int]] = []
    add = stamps.append

    def wrap(cls: Any, name: str, before: str, after: str | None = None) -> None:
        f = getattr(cls, name)

        @functools.wraps(f)
        def w(*a: Any, **k: Any) -> Any:
            add((before, now()))
            if after is None:
                return f(*a, **k)
            try:
                return f(*a, **k)
            finally:
                add((after, now()))

        setattr(cls, name, w)

    from waystation.core.store import journal, writer
    from waystation.gateway import stream
    from waystation.gateway.stomp import session
    from waystation.wire import stomp

    compiled = [
        m.__name__
        for m in (journal, writer, stream, session, stomp)
        if m.__file__ and not m.__file__.endswith(".py")
    ]
    if compiled:  # compiled callers call each other directly: the wrappers would see nothing
        sys.exit(
            f"receipt_trace needs the pure build ({', '.join(compiled)} compiled): "
            "pip install -e . without WAYSTATION_COMPILE"
        )

    wrap(stream.StreamProtocol, "data_received", "recv", "recv_end")
    wrap(stomp.StompParser, "feed", "parse", "parsed")
    wrap(journal.FileJournal, "write", "jw", "jw_end")
    wrap(writer.Writer, "_write", "pwrite")
    wrap(writer.Writer, "_sync_dirty", "sync", "sync_end")
    wrap(session.StompSession, "_write", "reply")
    wrap(stream.StreamProtocol, "_flush", "flush")

    def dump() -> None:  # at exit: the node stops gracefully on SIGTERM
        with open(trace_path, "w") as fh:
            fh.writelines(f"{k} {v}\n" for k, v in stamps)

    atexit.register(dump)
    from waystation.gateway.cli import main

    return main(["run", "--log-level", "warning"])


def _connect(port: int) -> socket.socket:
    s = socket.create_connection((HOST, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00")
    buf = b""
    while b"\x00" not in buf:
        buf += s.recv(4096)
    return s


def _produce(s: socket.socket, n: int, dest: str) -> list[tuple[int, int]]:
    head = (
        f"SEND\ndestination:{dest}\npersistent:true\n"
        "content-type:application/octet-stream\ncontent-length:100\n"
    ).encode()
    body = b"x" * 100 + b"\x00"
    out: list[tuple[int, int]] = []
    buf = b""
    now = time.perf_counter_ns
    for k in range(n):
        t0 = now()
        s.sendall(head + b"receipt:%d\n\n" % k + body)
        while b"\x00" not in buf:
            buf += s.recv(4096)
        t1 = now()
        frame, _, buf = buf.partition(b"\x00")
        buf = buf.lstrip(b"\r\n")
        if not frame.startswith(b"RECEIPT"):
            raise RuntimeError(f"expected RECEIPT, got {frame[:200]!r}")
        out.append((t0, t1))
    return out


def breakdown(
    client: list[tuple[int, int]], trace: list[tuple[str, int]]
) -> dict[str, list[float]]:
    """Microseconds per segment, one value per round trip that has both stamps."""
    times = [t for _, t in trace]
    segs: dict[str, list[float]] = {name: [] for name, _, _ in SEGMENTS}
    for cs, cr in client:
        first: dict[str, int] = {"c_send": cs, "c_recv": cr}
        last: dict[str, int] = {"c_send": cs, "c_recv": cr}
        for k, v in trace[bisect.bisect_left(times, cs) : bisect.bisect_left(times, cr)]:
            first.setdefault(k, v)
            last[k] = v
        for name, a, b in SEGMENTS:
            if a in first and b in first:
                end = last[b] if b == "flush" else first[b]
                segs[name].append((end - first[a]) / 1000)
    return segs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=3000, help="measured round trips")
    ap.add_argument("--warm", type=int, default=300, help="round trips before measuring")
    ap.add_argument("--port", type=int, default=61613, help="the embedded defaults' STOMP port")
    ap.add_argument("--data-dir", help="parent folder of the node's working dir")
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="waystation-trace-", dir=a.data_dir))
    trace_path = work / "trace.txt"
    node = subprocess.Popen(
        [sys.executable, __file__, "_node", str(trace_path)],
        cwd=work,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(work / "node.log", "wb"),  # noqa: SIM115 - the child owns it
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection((HOST, a.port), 0.25).close()
                break
            except OSError:
                if node.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"node did not start; see {work / 'node.log'}") from None
                time.sleep(0.05)
        s = _connect(a.port)
        dest = f"/queue/trace-{os.getpid()}"
        _produce(s, a.warm, dest)
        client = _produce(s, a.n, dest)
        s.close()
    finally:
        node.send_signal(signal.SIGTERM)
        node.wait(30)
    trace = [
        (k, int(v))
        for k, v in (line.split() for line in trace_path.read_text().split("\n") if line)
    ]
    rtt = statistics.median((b - a) / 1000 for a, b in client)
    print(f"{a.n} round trips, median {rtt:.1f} us ({1e6 / rtt:,.0f} msg/s); data in {work}")
    print(f"{'segment':70s} {'p50 us':>8s} {'mean us':>8s}")
    for name, values in breakdown(client, trace).items():
        if values:
            print(f"{name:70s} {statistics.median(values):8.1f} {statistics.fmean(values):8.1f}")
        else:
            print(f"{name:70s} {'-':>8s} {'-':>8s}  (path not taken)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "_node":
        sys.exit(_node(sys.argv[2]))
    sys.exit(main())
