"""The AMQP adapter's cost per message in one process, without sockets: A/B for gateway/amqp.

A proton engine client feeds an in-process ``AmqpSession`` (a real core ``Engine``, a journal
whose writes finish on the next loop turn, so the durable path runs as on a node) in batches
of ``--batch`` messages, the way one socket read brings them; the client's own time is
measured apart (thread CPU time) and taken off, so what is printed is the node side per
message.  Less noisy
than a node over loopback (bench/amqp_cpu.py), and not a substitute for it.

  python bench/amqp_inproc.py --variant new=gateway/amqp --variant old=/tmp/amqp_old/amqp
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from waystation.core.store.api import MemoryJournal

REPO = Path(__file__).resolve().parent.parent


def use_package(pkg: Path) -> None:
    """Load ``pkg`` as waystation.gateway.amqp (the rest of the tree unchanged)."""
    import waystation.gateway

    name = "waystation.gateway.amqp"
    spec = importlib.util.spec_from_file_location(
        name, pkg / "__init__.py", submodule_search_locations=[str(pkg)]
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    waystation.gateway.amqp = mod


class SoonJournal:
    """Stores nothing; a synchronous write is done on the next loop turn (an instant disk).
    Wraps a MemoryJournal: the compiled build refuses interpreted subclasses."""

    def __init__(self) -> None:
        self.inner = MemoryJournal()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def write(self, ops: Any, sync: bool) -> asyncio.Future[None] | None:
        if not sync:
            return None
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(fut.set_result, None)
        return fut


class Link:
    peer = "bench:1"

    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.out += data

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def measure(n: int, batch: int, durable: bool, presettled: bool) -> dict[str, float]:
    import gc

    from cproton_ffi import ffi, lib
    from proton import Connection, Message, Transport
    from proton import Link as PLink

    from waystation.core.engine import Engine
    from waystation.gateway.amqp.session import AmqpOptions, AmqpSession

    eng = Engine(journal=SoonJournal(), bindings=SoonJournal())
    await eng.start()
    link = Link()
    server = AmqpSession(eng, link, AmqpOptions(idle_timeout=0))
    conn, t = Connection(), Transport()  # no collector: the client reads no events
    conn.container = "bench"
    sasl = t.sasl()
    sasl.allowed_mechs("ANONYMOUS")
    t.bind(conn)
    ssn = conn.session()
    conn.open()
    ssn.open()
    client_s = 0.0
    server_s = 0.0

    async def move() -> None:
        nonlocal client_s, server_s
        for _ in range(50):
            c0 = time.thread_time()
            k = t.pending()
            data = t.peek(k) if k > 0 else b""
            if k > 0:
                t.pop(k)
            c1 = time.thread_time()
            if data:
                server.data_received(bytes(data))
            for _ in range(2):
                await asyncio.sleep(0)
            c2 = time.thread_time()
            out, link.out = bytes(link.out), bytearray()
            rest = out
            while rest:
                cap = t.capacity()
                if cap <= 0:
                    break
                t.push(rest[:cap])
                rest = rest[cap:]
            c3 = time.thread_time()
            client_s += (c1 - c0) + (c3 - c2)
            server_s += c2 - c1
            if not data and not out:
                return

    snd = ssn.sender("s")
    snd.target.address = "/queue/bench"
    if presettled:
        snd.snd_settle_mode = PLink.SND_SETTLED
    snd.open()
    await move()
    payload = bytes(Message(body=b"x" * 100, durable=durable).encode())
    gc.collect()
    server_s = client_s = 0.0
    sent = 0
    sp = snd._impl
    unsettled: list[Any] = []
    while sent < n:
        c0 = time.thread_time()
        k = 0
        while lib.pn_link_credit(sp) > 0 and k < batch and sent < n:
            tag = b"%d" % sent
            d = lib.pn_delivery(sp, (len(tag), ffi.from_buffer(tag)))
            lib.pn_link_send(sp, payload, len(payload))
            lib.pn_link_advance(sp)
            if presettled:
                lib.pn_delivery_settle(d)
            else:
                unsettled.append(d)
            sent += 1
            k += 1
        client_s += time.thread_time() - c0
        await move()
        c0 = time.thread_time()
        keep = []
        for d in unsettled:
            if lib.pn_delivery_remote_state(d):
                lib.pn_delivery_settle(d)
            else:
                keep.append(d)
        unsettled = keep
        client_s += time.thread_time() - c0
    await move()
    await move()
    rcv = ssn.receiver("r")
    rcv.source.address = "/queue/bench"
    rcv.open()
    rp = rcv._impl
    lib.pn_link_flow(rp, batch)
    buf = ffi.new("char[]", 65536)
    got = 0
    idle = 0
    while got < n:
        await move()
        c0 = time.thread_time()
        k = 0
        while True:
            d = lib.pn_link_current(rp)
            if not d or lib.pn_delivery_partial(d) or not lib.pn_delivery_readable(d):
                break
            lib.pn_link_recv(rp, buf, lib.pn_delivery_pending(d))
            lib.pn_link_advance(rp)
            lib.pn_delivery_update(d, lib.PN_ACCEPTED)
            lib.pn_delivery_settle(d)
            k += 1
        got += k
        if k:
            lib.pn_link_flow(rp, k)
        client_s += time.thread_time() - c0
        idle = 0 if k else idle + 1
        if idle > 5:
            raise RuntimeError(f"stalled at {got} of {n}")
    await move()
    await eng.stop()
    return {"server_us": server_s / n * 1e6, "client_us": client_s / n * 1e6}


def child(pkg: str, n: int, batch: int) -> None:
    from waystation.gateway.gc_policy import tune_for_serving

    use_package(Path(pkg).resolve())
    tune_for_serving()  # the collector's schedule of a running node
    out = {}
    for name, durable, presettled in (("presettled", False, True), ("durable", True, False)):
        out[name] = asyncio.run(measure(n, batch, durable, presettled))["server_us"]
    print(json.dumps(out))


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variant", action="append", required=True, help="NAME=DIR of an amqp pkg")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--batch", type=int, default=200)
    a = p.parse_args()
    variants = [(v.split("=", 1)[0], v.split("=", 1)[1]) for v in a.variant]
    res: dict[tuple[str, str], list[float]] = {}
    for r in range(a.rounds):
        for name, pkg in variants if r % 2 == 0 else variants[::-1]:
            out = subprocess.run(
                [sys.executable, __file__, "child", pkg, str(a.n), str(a.batch)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            for scen, us in json.loads(out.strip().splitlines()[-1]).items():
                res.setdefault((name, scen), []).append(us)
                print(f"round {r} {name:>8} {scen:>10}: {us:.2f} us/msg", file=sys.stderr)
    print("| variant | scenario | node side us/msg (median; runs) |\n|---|---|---|")
    for (name, scen), xs in res.items():
        runs = ", ".join(f"{x:.1f}" for x in xs)
        print(f"| {name} | {scen} | {statistics.median(xs):.2f} ({runs}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
