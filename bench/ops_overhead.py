"""What watching a node costs: the live STOMP scenario of ``bench/stomp_bench.py`` with
Prometheus ``/metrics`` scraped every second and the web console open in headless Chromium,
against the same scenario with neither, in alternating rounds on one node (issue 13: within 5%).

  python bench/ops_overhead.py --rounds 4 --n 100000
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stomp_bench import (  # noqa: E402
    DEFAULT_BENCH_DIR,
    HOST,
    STOMP_PORT,
    WaystationBroker,
    run_client,
)

HTTP = "http://127.0.0.1:8161"


def scrape_every_second(stop: threading.Event, count: list[int]) -> None:
    while not stop.wait(1.0):
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"{HTTP}/metrics", timeout=5) as r,
        ):
            r.read()
            count[0] += 1


@contextlib.contextmanager
def watched() -> Iterator[list[int]]:
    """Metrics scraped each second and the console open (it polls the admin API itself)."""
    from playwright.sync_api import sync_playwright

    stop, scrapes = threading.Event(), [0]
    t = threading.Thread(target=scrape_every_second, args=(stop, scrapes), daemon=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True)
        page = browser.new_page()
        page.goto(f"{HTTP}/console")
        page.wait_for_load_state("networkidle")
        t.start()
        try:
            yield scrapes
        finally:
            stop.set()
            t.join()
            browser.close()


def live_run(bench_dir: Path, n: int, pid: int) -> float:
    cmd = [
        sys.executable,
        str(bench_dir / "bench.py"),
        "stomp",
        "--host",
        HOST,
        "--port",
        str(STOMP_PORT),
        "--n",
        str(n),
        "--mode",
        "live",
    ]
    r = run_client(cmd, pid, timeout=300)
    rate = r.get("e2e_rate")
    if not isinstance(rate, int | float):
        raise SystemExit(f"bench run failed: {r}")
    return float(rate)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--n", type=int, default=100000)
    ap.add_argument("--bench-dir", type=Path, default=DEFAULT_BENCH_DIR)
    args = ap.parse_args()
    node = WaystationBroker(None, STOMP_PORT, ready_timeout=30, keep=False)
    node.start()
    off: list[float] = []
    on: list[float] = []
    try:
        live_run(args.bench_dir, args.n // 4, node.pid)  # warm-up
        for i in range(args.rounds):
            off.append(live_run(args.bench_dir, args.n, node.pid))
            with watched() as scrapes:
                on.append(live_run(args.bench_dir, args.n, node.pid))
            print(
                f"round {i + 1}: off {off[-1]:,.0f} msg/s, watched {on[-1]:,.0f} msg/s "
                f"({scrapes[0]} scrapes)",
                flush=True,
            )
    finally:
        node.stop()
    a, b = statistics.median(off), statistics.median(on)
    print(f"\nlive STOMP e2e, median of {args.rounds}: off {a:,.0f} msg/s, watched {b:,.0f} msg/s")
    print(f"change: {100 * (b - a) / a:+.1f}% (target: within 5%)")


if __name__ == "__main__":
    main()
