#!/usr/bin/env python3
"""Bridge throughput over a high-latency link: a confirmation window of 1000 against 1.

Two real nodes, site-a bridged to site-b through the test suite's WanProxy with ``--latency``
seconds one way (default 50 ms).  For each window the proxy first refuses connections while
``N`` durable messages are stored at site-a for ``site-b::orders``; then the path opens and a
consumer at site-b times the drain from the first arrival to the last (so connection set-up
and the producer do not count).  Prints messages/s for both windows and their ratio.

  python bench/bridge_bench.py
  python bench/bridge_bench.py --latency 0.05 --n-large 10000 --n-small 40 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "tests", REPO / "tests" / "gateway", REPO / "tests" / "bridges"):
    sys.path.insert(0, str(p))

import stomp  # noqa: E402
from sitekit import send_all, two_sites  # noqa: E402


class Arrivals(stomp.ConnectionListener):
    """Records the arrival time of every message."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.cond = threading.Condition()

    def on_message(self, frame: stomp.utils.Frame) -> None:
        with self.cond:
            self.times.append(time.monotonic())
            self.cond.notify_all()

    def wait(self, n: int, timeout: float) -> bool:
        end = time.monotonic() + timeout
        with self.cond:
            while len(self.times) < n:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
        return True


def measure(window: int, n: int, latency: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix=f"bridge-bench-w{window}-") as tmp:
        sites = two_sites(
            Path(tmp),
            bridge={
                "confirmation_window": window,
                "retry_interval": "100ms",
                "max_retry_interval": "200ms",
                "heartbeat": "2s",
                "liveness_timeout": "10s",
            },
            start=False,
        )
        try:
            sites.proxy.refuse(True)
            sites.b.start()
            sites.a.start()
            bodies = [f"m{i:06d}" for i in range(n)]
            confirmed = send_all(sites.a.stomp_port, "site-b::orders", bodies, batch=500)
            assert len(confirmed) == n, f"only {len(confirmed)} of {n} stored at site-a"
            conn = stomp.Connection12([("127.0.0.1", sites.b.stomp_port)])
            arrivals = Arrivals()
            conn.set_listener("a", arrivals)
            conn.connect("guest", "guest", wait=True)
            conn.subscribe("/queue/orders", id="1", ack="auto")
            sites.proxy.set_latency(latency)
            sites.proxy.refuse(False)
            budget = 60 + n * (2 * latency + 0.02) / window * 3
            if not arrivals.wait(n, budget):
                raise RuntimeError(f"window {window}: {len(arrivals.times)} of {n} arrived")
            conn.disconnect()
            t = arrivals.times
            seconds = t[-1] - t[0]
            return {
                "window": window,
                "messages": n,
                "seconds": round(seconds, 3),
                "rate": round((n - 1) / seconds, 1),
            }
        finally:
            sites.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--latency", type=float, default=0.05, help="one-way seconds (0.05)")
    ap.add_argument("--n-large", type=int, default=20000, help="messages with window 1000")
    ap.add_argument("--n-small", type=int, default=30, help="messages with window 1")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    big = measure(1000, args.n_large, args.latency)
    small = measure(1, args.n_small, args.latency)
    ratio = big["rate"] / small["rate"]
    print(
        f"bridge throughput, {args.latency * 1000:.0f} ms one way ({2 * args.latency * 1000:.0f} ms RTT):"
    )
    for r in (big, small):
        print(
            f"  window {r['window']:>5}: {r['rate']:>9.1f} msg/s "
            f"({r['messages']} messages in {r['seconds']:.2f} s)"
        )
    print(f"  ratio: {ratio:.0f}x (the issue asks for at least 10x)")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"latency": args.latency, "results": [big, small], "ratio": ratio}, indent=2)
        )
    return 0 if ratio >= 10 else 1


if __name__ == "__main__":
    sys.exit(main())
