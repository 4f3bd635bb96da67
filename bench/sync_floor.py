#!/usr/bin/env python3
"""The floor under "persistent, receipt per message, one producer": what a node that does
nothing but append and fdatasync each SEND, then answer RECEIPT, reaches on this disk through
the same clients as the real node.

The synchronous producer's round trip is the client's own CPU, the node's CPU and one
fdatasync, one after the other.  This runner measures each part: a bare ``pwritev`` +
``fdatasync`` loop on a pre-allocated file (the disk), then a minimal uvloop server (the
floor: no routing, no queue, no index) and a Waystation node on free ports, each driven by a
lean raw-socket client and by ``../shared/bench/bench.py stomp --mode persistent-sync``, then
by ``stomp_bench.py``'s concurrent-sync client: one producer, then 16 at once (the floor
commits a loop turn's appends with one fdatasync, as the journal does).

  python bench/sync_floor.py                                   # floor and node, 5,000 each
  python bench/sync_floor.py --waystation-python VENV/bin/python --reps 3
"""

from __future__ import annotations

import argparse
import asyncio
import mmap
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stomp_bench import (  # noqa: E402
    DEFAULT_BENCH_DIR,
    HOST,
    PEERS_PYTHON,
    WaystationBroker,
    cpu_s,
    free_port,
    run_client,
    sync_producers,
    wait_port,
)

BODY = b"x" * 100
TRAILER = bytes(20)  # zeros after each record, as the journal writes its end marker


ZEROS = bytes(64 << 10)


def preallocated(path: Path, size: int) -> int:
    """A file written with zeros and synced, so later fdatasyncs flush data only.

    In 64 KiB pieces, as the journal's ``Layout.create`` writes them: the page cache keeps a
    file in folios as large as the writes that filled it, and fdatasync writes back the whole
    folio a small append dirtied.  One 16 MiB write made each later fdatasync cost 96 us and
    38 us of CPU here, against 78 us and 24 us after 64 KiB writes."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    for off in range(0, size, len(ZEROS)):
        os.pwrite(fd, ZEROS[: size - off], off)
    os.fsync(fd)
    return fd


def disk(path: Path, n: int, direct: bool = False) -> dict[str, float]:
    """``n`` appends of a 176-byte record, each followed by fdatasync; ``direct``: instead
    rewrite the record's 4 KiB block with O_DIRECT | O_DSYNC (no page cache: the least a
    durable small write can cost on this disk, for reference)."""
    fd = preallocated(path, 16 << 20)
    rec = b"r" * 176
    lat: list[float] = []
    block = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT requires
    dfd = os.open(path, os.O_RDWR | os.O_DIRECT | os.O_DSYNC) if direct else fd
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    for i in range(n):
        t0 = time.perf_counter()
        if direct:
            os.pwritev(dfd, [block], (i * len(rec)) & ~4095)
        else:
            os.pwritev(fd, [rec, TRAILER], i * len(rec))
            os.fdatasync(fd)
        lat.append(time.perf_counter() - t0)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    block.close()
    if direct:
        os.close(dfd)
    os.close(fd)
    path.unlink()
    lat.sort()
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return {
        "p50_us": round(lat[n // 2] * 1e6, 1),
        "mean_us": round(sum(lat) / n * 1e6, 1),
        "p99_us": round(lat[int(n * 0.99)] * 1e6, 1),
        "cpu_us": round(cpu / n * 1e6, 1),
    }


# -- the floor server (``sync_floor.py _serve PORT FILE``) ----------------------------------
class Floor:
    """The file and the group commit every connection shares: frames are appended as they
    come, and at the end of the loop turn one fdatasync covers them all before their RECEIPTs
    go out, as the journal groups a turn's synchronous writes."""

    def __init__(self, fd: int) -> None:
        self.fd, self.end = fd, 0
        self.waiting: list[tuple[asyncio.Transport, list[bytes]]] = []

    def append(self, frame: bytes) -> None:
        os.pwritev(self.fd, [frame, TRAILER], self.end)
        self.end += len(frame)

    def hold(self, transport: asyncio.Transport, receipts: list[bytes]) -> None:
        if not self.waiting:
            asyncio.get_running_loop().call_soon(self.commit)
        self.waiting.append((transport, receipts))

    def commit(self) -> None:
        os.fdatasync(self.fd)
        waiting, self.waiting = self.waiting, []
        for transport, receipts in waiting:
            transport.write(b"".join(receipts))


class FloorProtocol(asyncio.Protocol):
    """CONNECT -> CONNECTED; every other frame is appended, then RECEIPT if asked once the
    turn's fdatasync is done."""

    def __init__(self, floor: Floor) -> None:
        self.floor, self.buf = floor, b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.buf += data
        receipts: list[bytes] = []
        while (i := self.buf.find(b"\0")) >= 0:
            frame, self.buf = self.buf[:i], self.buf[i + 1 :].lstrip(b"\r\n")
            if frame.startswith((b"CONNECT", b"STOMP")):
                self.transport.write(b"CONNECTED\nversion:1.2\n\n\0")
                continue
            if frame.startswith(b"DISCONNECT"):
                self.transport.write(b"RECEIPT\nreceipt-id:bye\n\n\0")
                continue
            self.floor.append(frame)
            j = frame.find(b"\nreceipt:")
            if j >= 0:
                k = frame.find(b"\n", j + 1)
                receipts.append(b"RECEIPT\nreceipt-id:" + frame[j + 9 : k] + b"\n\n\0")
        if receipts:
            self.floor.hold(self.transport, receipts)


def serve(port: int, path: str) -> None:
    floor = Floor(preallocated(Path(path), 256 << 20))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        await loop.create_server(lambda: FloorProtocol(floor), HOST, port)
        await asyncio.Event().wait()

    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())


# -- clients --------------------------------------------------------------------------------
def lean(port: int, n: int) -> float:
    """One blocking socket: SEND with a receipt, read the RECEIPT, repeat; msg/s."""
    with socket.create_connection((HOST, port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(b"CONNECT\naccept-version:1.2\nhost:/\n\n\0")
        s.recv(4096)
        head = b"SEND\ndestination:/queue/floor\npersistent:true\ncontent-length:100\nreceipt:"
        t0 = time.monotonic()
        for i in range(n):
            s.sendall(head + str(i).encode() + b"\n\n" + BODY + b"\0")
            got = s.recv(4096)
            while not got.endswith(b"\0"):
                got += s.recv(4096)
        return n / (time.monotonic() - t0)


def harness(a: argparse.Namespace, port: int, n: int) -> dict[str, Any]:
    cmd = [a.client_python, str(a.bench_dir / "bench.py"), "stomp", "--host", HOST]
    cmd += ["--port", str(port), "--n", str(n), "--mode", "persistent-sync"]
    cmd += ["--dest", "/queue/floor", "--login", "guest", "--passcode", "guest"]
    r = run_client(cmd, None, 300)
    if "send_rate" not in r:
        raise RuntimeError(f"bench.py failed: {r.get('error')}")
    return {"rate": r["send_rate"], "client_us": r["send_client_cpu_s"] / n * 1e6}


def one_and_many(a: argparse.Namespace, port: int) -> tuple[float, float]:
    """The concurrent-sync scenario of ``stomp_bench.py``, its own client: one producer, then
    ``a.producers`` at once, ``a.per`` messages each (msg/s, msg/s)."""
    c = argparse.Namespace(
        size=len(BODY), port=port, timeout=120, idle=5, login="guest", passcode="guest", vhost="/"
    )

    async def run() -> tuple[float, float]:
        one = await sync_producers(c, "/queue/floor-1", 1, a.per)
        many = await sync_producers(c, "/queue/floor-many", a.producers, a.per)
        return float(one["send_rate"]), float(many["send_rate"])

    return asyncio.run(run())


def measure(a: argparse.Namespace, port: int, pid: int) -> dict[str, float]:
    lean(port, 500)  # warm-up
    rates, node_us, h_rates, h_client, h_node, ones, manys = [], [], [], [], [], [], []
    for _ in range(a.reps):
        c0 = cpu_s(pid)
        rates.append(lean(port, a.n))
        node_us.append((cpu_s(pid) - c0) / a.n * 1e6)
        c0 = cpu_s(pid)
        h = harness(a, port, a.n)
        h_node.append((cpu_s(pid) - c0) / a.n * 1e6)
        h_rates.append(h["rate"])
        h_client.append(h["client_us"])
        one, many = one_and_many(a, port)
        ones.append(one)
        manys.append(many)
    med = statistics.median
    return {
        "lean": med(rates),
        "lean_node_us": med(node_us),
        "harness": med(h_rates),
        "harness_client_us": med(h_client),
        "harness_node_us": med(h_node),
        "one": med(ones),
        "many": med(manys),
        "ratio": med(m / o for m, o in zip(manys, ones, strict=True)),
    }


def measure_all(a: argparse.Namespace, work: Path) -> dict[str, dict[str, float]]:
    """The disk alone, then the floor server, then a Waystation node, files in ``work``."""
    rows = {"disk": disk(work / "disk.dat", a.n), "direct": disk(work / "disk.dat", a.n, True)}
    port = free_port()
    cmd = [sys.executable, __file__, "_serve", str(port), str(work / "floor.dat")]
    floor = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    try:
        if wait_port(port, 30, floor.pid) is None:
            raise RuntimeError(f"the floor server did not start on port {port}")
        rows["floor"] = measure(a, port, floor.pid)
    finally:
        floor.terminate()
        floor.wait()
    port = free_port()
    config = work / "node.toml"
    config.write_text(
        f'[acceptors.stomp]\nurl = "tcp://{HOST}:{port}"\n[acceptors.http]\nurl = "http://{HOST}:0"\n'
        "[acceptors.amqp]\nenabled = false\n[acceptors.mqtt]\nenabled = false\n"
    )
    node = WaystationBroker(str(config), port, 60, False, a.waystation_python)
    node.start()
    try:
        assert node.pid is not None
        rows["waystation"] = measure(a, port, node.pid)
    finally:
        node.stop()
    return rows


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "_serve":
        serve(int(sys.argv[2]), sys.argv[3])
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=5000, help="round trips per run")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--producers", type=int, default=16, help="the concurrent run's producers")
    p.add_argument("--per", type=int, default=1000, help="messages per concurrent producer")
    p.add_argument(
        "--dir", type=Path, default=None, help="folder for the files (default: a temp dir)"
    )
    p.add_argument("--bench-dir", type=Path, default=DEFAULT_BENCH_DIR)
    p.add_argument(
        "--client-python",
        default=str(PEERS_PYTHON) if PEERS_PYTHON.exists() else sys.executable,
        help="Python that runs bench.py",
    )
    p.add_argument("--waystation-python", default=None, help="an installed node's Python")
    a = p.parse_args()
    a.bench_dir = a.bench_dir.resolve()
    work = Path(tempfile.mkdtemp(prefix="sync-floor-", dir=a.dir))
    try:
        rows = measure_all(a, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    for key, what in (
        ("disk", "fdatasync after a 176-byte append"),
        ("direct", "the same block written O_DIRECT | O_DSYNC"),
    ):
        d = rows[key]
        print(
            f"{what} (n={a.n}): p50 {d['p50_us']} us, mean {d['mean_us']} us, "
            f"p99 {d['p99_us']} us; CPU {d['cpu_us']} us each"
        )
    print()
    print(
        f"persistent SEND + RECEIPT: one producer n={a.n}; concurrent-sync 1 then "
        f"{a.producers} producers x {a.per}; medians of {a.reps}\n"
    )
    print(
        "| server | lean client msg/s | its server CPU us/msg | bench.py msg/s "
        "| bench.py client CPU us/msg | its server CPU us/msg "
        f"| 1 producer msg/s | {a.producers} producers msg/s | ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in ("floor", "waystation"):
        r = rows[name]
        print(
            f"| {name} | {r['lean']:,.0f} | {r['lean_node_us']:.0f} | {r['harness']:,.0f} | "
            f"{r['harness_client_us']:.0f} | {r['harness_node_us']:.0f} | {r['one']:,.0f} | "
            f"{r['many']:,.0f} | {r['ratio']:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
