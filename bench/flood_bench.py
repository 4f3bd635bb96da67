#!/usr/bin/env python3
"""A bystander's SEND -> RECEIPT round trip, idle and under each flood at the protocol edges.

One real node with security on (a PBKDF2 user at the default 600,000 iterations).  A
bystander STOMP client, logged in before anything starts, sends non-persistent messages with
a receipt every ``--interval`` seconds and times each round trip.  A flood runs in another
process for ``--duration`` seconds:

- ``wrong-password``: ``--workers`` loops of REST Basic and STOMP CONNECT with a wrong
  password (each a full hash when not throttled);
- ``idle-sockets``: ``--sockets`` sockets opened to the STOMP and HTTP listeners and left
  silent (half each);
- ``tunnel+sockjs``: unauthenticated tunnel ``open`` and SockJS session requests, as fast as
  they are answered;
- ``rest-consumers``: pull consumer creations with valid credentials, as fast as answered.

Prints, per scenario: median, p95 and worst round trip, the median's ratio to idle, and
what the flood got (requests answered, refused, errors).  The goal (issue 10) is a median
within 2x idle.  Numbers on a shared 2-core machine are noisy: compare within one run.

  python bench/flood_bench.py
  python bench/flood_bench.py --duration 8 --sockets 15000 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import resource
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "tests", REPO / "tests" / "gateway"):
    sys.path.insert(0, str(p))

import aiohttp  # noqa: E402
from nodekit import SECURITY_USERS, NodeProcess  # noqa: E402

from waystation.config.passwords import hash_password  # noqa: E402

USER, PASSWORD = "app", "secret"
BYSTANDER = "127.0.0.2"


def _config() -> str:
    """nodekit's users and rw grants, with USER's password a default-strength hash (its
    first user, so an unknown login costs that hash too)."""
    plain = f'password = "{PASSWORD}"'
    assert f'name = "{USER}"' in SECURITY_USERS and SECURITY_USERS.count(plain) == 1
    return SECURITY_USERS.replace(plain, f'password_hash = "{hash_password(PASSWORD)}"')


def _frame(command: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    head = "".join(f"{k}:{v}\n" for k, v in headers.items())
    return f"{command}\n{head}\n".encode() + body + b"\x00"


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    data = await reader.readuntil(b"\x00")
    return data.lstrip(b"\r\n")


# -- the bystander ----------------------------------------------------------------------
async def bystander(port: int, duration: float, interval: float) -> list[float]:
    # from another source address than the floods (127.0.0.1): per-address limits are
    # meant to spare other clients, not the flooding one
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(BYSTANDER, 0))
    writer.write(
        _frame(
            "CONNECT",
            {
                "accept-version": "1.2",
                "host": "x",
                "login": USER,
                "passcode": PASSWORD,
                "heart-beat": "0,0",
            },
        )  # fmt: skip
    )
    first = await asyncio.wait_for(_read_frame(reader), 30)
    assert first.startswith(b"CONNECTED"), first
    rtts: list[float] = []
    end = time.monotonic() + duration
    n = 0
    while time.monotonic() < end:
        n += 1
        t0 = time.monotonic()
        writer.write(
            _frame("SEND", {"destination": "/queue/bystander", "receipt": str(n)}, b"ping")
        )
        while True:
            f = await asyncio.wait_for(_read_frame(reader), 60)
            if f.startswith(b"RECEIPT"):
                break
            if f.startswith(b"ERROR"):
                raise RuntimeError(f.decode(errors="replace"))
        rtts.append(time.monotonic() - t0)
        await asyncio.sleep(interval)
    writer.write(_frame("DISCONNECT", {}))
    writer.close()
    return rtts


# -- floods (each runs in its own process) ----------------------------------------------
async def _wrong_passwords(node: dict, end: float, workers: int, stats: dict) -> None:
    bad = {"Authorization": aiohttp.encode_basic_auth(USER, "wrong")}

    async def rest(s: aiohttp.ClientSession) -> None:
        while time.monotonic() < end:
            try:
                async with s.post(f"{node['http']}/queues/x/pull-consumers", headers=bad) as r:
                    await r.read()
                    stats["answered"] += 1
                    stats["throttled"] += r.status == 401 and "throttle" in await r.text()
            except (aiohttp.ClientError, OSError):
                stats["errors"] += 1

    async def stomp_loop() -> None:
        while time.monotonic() < end:
            try:
                r, w = await asyncio.open_connection("127.0.0.1", node["stomp"])
                w.write(_frame("CONNECT", {"accept-version": "1.2", "host": "x",
                                           "login": USER, "passcode": "wrong"}))  # fmt: skip
                f = await asyncio.wait_for(_read_frame(r), 30)
                stats["answered"] += 1
                stats["throttled"] += b"throttle" in f
                w.close()
            except (OSError, asyncio.IncompleteReadError, TimeoutError):
                stats["errors"] += 1

    async with aiohttp.ClientSession() as s:
        tasks = [rest(s) for _ in range(workers)] + [stomp_loop() for _ in range(workers)]
        await asyncio.gather(*tasks)


async def _idle_sockets(node: dict, end: float, count: int, stats: dict) -> None:
    socks: list[socket.socket] = []
    try:
        for i in range(count):
            port = node["stomp"] if i % 2 else node["http_port"]
            try:
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", port))
                socks.append(s)
                stats["answered"] += 1
            except OSError:
                stats["errors"] += 1
            if i % 500 == 0:
                await asyncio.sleep(0)
        while time.monotonic() < end:
            await asyncio.sleep(0.2)
        closed = 0
        for s in socks:  # how many did the server answer or close (refusals, timeouts)?
            try:
                s.recv(1, socket.MSG_PEEK)
                closed += 1  # data (a refusal or timeout notice) or EOF
            except BlockingIOError:
                pass  # still held open, silent
            except OSError:
                closed += 1
        stats["throttled"] = closed
    finally:
        for s in socks:
            s.close()


async def _sessions(node: dict, end: float, workers: int, stats: dict) -> None:
    async def tunnel(s: aiohttp.ClientSession) -> None:
        while time.monotonic() < end:
            try:
                async with s.post(f"{node['http']}/tunnel/open", params={"protocol": "stomp"}) as r:
                    await r.read()
                    stats["answered"] += 1
                    stats["throttled"] += r.status == 503
            except (aiohttp.ClientError, OSError):
                stats["errors"] += 1

    async def sockjs(s: aiohttp.ClientSession, k: int) -> None:
        i = 0
        while time.monotonic() < end:
            i += 1
            try:
                async with s.post(f"{node['http']}/sockjs/stomp/0/f{k}x{i}/xhr") as r:
                    await r.read()
                    stats["answered"] += 1
                    stats["throttled"] += r.status == 503
            except (aiohttp.ClientError, OSError):
                stats["errors"] += 1

    async with aiohttp.ClientSession() as s:
        await asyncio.gather(*[tunnel(s) for _ in range(workers)],
                             *[sockjs(s, k) for k in range(workers)])  # fmt: skip


async def _consumers(node: dict, end: float, workers: int, stats: dict) -> None:
    good = {"Authorization": aiohttp.encode_basic_auth(USER, PASSWORD)}

    async def loop(s: aiohttp.ClientSession) -> None:
        while time.monotonic() < end:
            try:
                async with s.post(f"{node['http']}/queues/flood/pull-consumers", headers=good) as r:
                    await r.read()
                    stats["answered"] += 1
                    stats["throttled"] += r.status != 201
            except (aiohttp.ClientError, OSError):
                stats["errors"] += 1

    async with aiohttp.ClientSession() as s:
        await asyncio.gather(*[loop(s) for _ in range(workers)])


FLOODS = {  # wrong-password last: it locks the flooding address out of logins for a while
    "idle-sockets": _idle_sockets,
    "tunnel+sockjs": _sessions,
    "rest-consumers": _consumers,
    "wrong-password": _wrong_passwords,
}


def _flood_main(name: str, node: dict, duration: float, arg: int, out: mp.Queue) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    stats = {"answered": 0, "throttled": 0, "errors": 0}
    end = time.monotonic() + duration
    try:
        asyncio.run(FLOODS[name](node, end, arg, stats))
    except Exception as e:  # report, do not hang the bench
        stats["failure"] = repr(e)[:200]
    out.put(stats)


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=6.0, help="seconds per scenario")
    ap.add_argument("--interval", type=float, default=0.02, help="seconds between pings")
    ap.add_argument("--workers", type=int, default=4, help="flood loops per kind")
    ap.add_argument("--sockets", type=int, default=15000, help="idle sockets to open")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="flood-bench-"))
    node = NodeProcess(work, extra_config=_config(), http=True, log_level="WARNING").start()
    info = {
        "stomp": node.stomp_port,
        "http": node.http_url,
        "http_port": node.http_port,
    }
    rows = []
    try:
        idle = asyncio.run(bystander(node.stomp_port, args.duration, args.interval))
        rows.append(("idle", idle, None))
        for name in FLOODS:
            arg = args.sockets if name == "idle-sockets" else args.workers
            out: mp.Queue = mp.Queue()
            proc = mp.Process(target=_flood_main, args=(name, info, args.duration + 1, arg, out))
            proc.start()
            time.sleep(1.0)  # let the flood build up
            rtts = asyncio.run(bystander(node.stomp_port, args.duration, args.interval))
            stats = out.get(timeout=args.duration + 120)
            proc.join(30)
            rows.append((name, rtts, stats))
            time.sleep(2.0)  # let the node shed what the flood left (timeouts, reapers)
    finally:
        node.stop()

    base = statistics.median(rows[0][1])
    print(f"{'scenario':16} {'n':>5} {'median ms':>10} {'p95 ms':>8} {'max ms':>8} "
          f"{'x idle':>7}  flood (answered / refused-or-closed / errors)")  # fmt: skip
    results = []
    for name, rtts, stats in rows:
        med = statistics.median(rtts)
        row = {
            "scenario": name,
            "samples": len(rtts),
            "median_ms": round(med * 1000, 2),
            "p95_ms": round(_pct(rtts, 0.95) * 1000, 2),
            "max_ms": round(max(rtts) * 1000, 2),
            "ratio": round(med / base, 2),
            "flood": stats,
        }
        results.append(row)
        fl = "" if stats is None else (
            f"{stats['answered']} / {stats['throttled']} / {stats['errors']}"
            + (f"  {stats['failure']}" if "failure" in stats else "")
        )  # fmt: skip
        print(f"{name:16} {len(rtts):>5} {row['median_ms']:>10.2f} {row['p95_ms']:>8.2f} "
              f"{row['max_ms']:>8.2f} {row['ratio']:>7.2f}  {fl}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
