"""Idle MQTT connections: the broker's RSS per connected, idle client.

Opens ``--clients`` MQTT 3.1.1 connections (CONNECT, keep-alive 600 s, one SUBSCRIBE each, then
silence) against a broker already listening, and reads the broker's RSS (its process tree,
from /proc) before and after.  Run it against a Waystation node and against mosquitto in the
same sitting:

  python bench/mqtt_idle.py --pid $(pgrep -f 'waystation.gateway.cli run') --clients 10000
  python bench/mqtt_idle.py --pid $(pgrep mosquitto) --clients 10000
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from waystation.wire.mqtt import (  # noqa: E402
    MQTT_311,
    Connect,
    Subscribe,
    SubscriptionRequest,
    encode,
)


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def one(port: int, i: int, hold: list[asyncio.StreamWriter]) -> bool:
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(encode(Connect(f"idle-{i}", keepalive=600), MQTT_311))
        w.write(encode(Subscribe(1, [SubscriptionRequest(f"idle/{i}", 1)]), MQTT_311))
        await w.drain()
        got = await asyncio.wait_for(r.readexactly(4), 30)  # CONNACK
        if got[0] != 0x20 or got[3] != 0:
            return False
        await asyncio.wait_for(r.readexactly(5), 30)  # SUBACK
        hold.append(w)
        return True
    except (OSError, asyncio.IncompleteReadError, TimeoutError):
        return False


async def main_async(a: argparse.Namespace) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    before = rss_kb(a.pid)
    hold: list[asyncio.StreamWriter] = []
    t0 = time.monotonic()
    ok = 0
    for start in range(0, a.clients, 500):
        batch = range(start, min(a.clients, start + 500))
        ok += sum(await asyncio.gather(*(one(a.port, i, hold) for i in batch)))
    took = time.monotonic() - t0
    await asyncio.sleep(a.settle)
    after = rss_kb(a.pid)
    per = (after - before) * 1024 / max(ok, 1)
    print(
        f"{ok}/{a.clients} idle clients connected in {took:.1f}s; broker RSS "
        f"{before / 1024:.1f} -> {after / 1024:.1f} MiB: {per / 1024:.2f} KiB per connection"
    )
    for w in hold:
        w.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pid", type=int, required=True, help="the broker's process id")
    p.add_argument("--port", type=int, default=1883)
    p.add_argument("--clients", type=int, default=10000)
    p.add_argument("--settle", type=float, default=3.0)
    asyncio.run(main_async(p.parse_args()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
