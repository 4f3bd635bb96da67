#!/usr/bin/env python3
"""HTTP tunnel throughput: 100-byte STOMP messages from a producer tunnel to a consumer
tunnel, directly and through a local squid (absolute-URI requests, no CONNECT).

  python bench/tunnel_bench.py [--n 50000] [--no-squid]

Starts its own node (and squid) on 127.0.0.1 in a temp folder and stops them at the end.
Prints msg/s from the first send to the last message received (end to end).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "gateway")]

from nodekit import NodeProcess  # noqa: E402
from squidkit import Squid  # noqa: E402
from tunnelkit import AsyncStomp  # noqa: E402

BODY = b"x" * 100


async def run_once(url: str, n: int, proxy: str | None) -> float:
    consumer = await AsyncStomp.tunnel(url, proxy=proxy)
    producer = await AsyncStomp.tunnel(url, proxy=proxy)
    q = f"bench-{time.monotonic_ns()}"
    consumer.frame("SUBSCRIBE", destination=f"/queue/{q}", id="s", ack="auto", receipt="s")
    await consumer.receipt("s")
    t0 = time.perf_counter()

    async def produce() -> None:
        for i in range(n):
            producer.frame("SEND", BODY, destination=f"/queue/{q}")
            if i % 1000 == 999:
                await producer.writer.drain()

    sending = asyncio.ensure_future(produce())
    for _ in range(n):
        await consumer.next(timeout=60)
    rate = n / (time.perf_counter() - t0)
    await sending
    await producer.close()
    await consumer.close()
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--no-squid", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tunnel-bench-"))
    work.chmod(0o755)  # squid's proxy user writes its logs here
    node = NodeProcess(work / "node", http=True, log_level="WARNING").start()
    squid = None if args.no_squid else Squid(work / "squid").start()
    try:
        url = node.http_url + "/tunnel"
        asyncio.run(run_once(url, 2000, None))  # warm-up
        print(f"direct:        {asyncio.run(run_once(url, args.n, None)):>9,.0f} msg/s")
        if squid is not None:
            rate = asyncio.run(run_once(url, args.n, squid.url))
            print(f"through squid: {rate:>9,.0f} msg/s")
    finally:
        if squid is not None:
            squid.stop()
        node.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
