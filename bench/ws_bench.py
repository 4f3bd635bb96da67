#!/usr/bin/env python3
"""STOMP over WebSocket: Waystation's ``/stomp`` beside RabbitMQ's Web-STOMP, in one sitting.

Runs ``../shared/bench/bench.py stomp-ws`` (the shared harness: the ``websockets`` client,
one STOMP frame per WebSocket message) against each target in turn and prints a table.

  python bench/ws_bench.py                                  # both, 3 reps, N=100000
  python bench/ws_bench.py --targets waystation --reps 1 --n 20000

Waystation runs on its embedded defaults (``ws://127.0.0.1:8161/stomp``); RabbitMQ is
started by ``brokers.sh`` (``ws://127.0.0.1:15674/ws``).  Both use STOMP port 61613, so they
run one after the other.  Only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stomp_bench as sb  # noqa: E402

URLS = {"waystation": "ws://127.0.0.1:8161/stomp", "rabbitmq": "ws://127.0.0.1:15674/ws"}
# No client-ack row: bench.py's stomp-ws client never writes its ACK frames (its STOMP
# protocol object has no transport over WebSocket), so only a broker with unlimited prefetch
# (RabbitMQ's default) finishes that mode; Waystation stops at its 1000-message window.
MODES = {
    "nonpersistent": ("--mode", "nonpersistent"),
    "live": ("--mode", "live"),
    "persistent-batch": ("--mode", "persistent-batch", "--batch", "1000"),
}
RATES = ("send_rate", "recv_rate", "e2e_rate")


def broker(name: str, a: argparse.Namespace) -> sb.Broker:
    if name == "waystation":
        return sb.WaystationBroker(None, sb.STOMP_PORT, 60, keep=False)
    return sb.PeerBroker(name, a.bench_dir, 180)


def run_one(name: str, mode: str, a: argparse.Namespace, pid: int | None) -> dict[str, Any]:
    cmd = [
        str(a.python),
        str(a.bench_dir / "bench.py"),
        "stomp-ws",
        "--url",
        URLS[name],
        "--n",
        str(a.n),
        "--timeout",
        "120",
        *MODES[mode],
    ]
    return sb.run_client(cmd, pid, 120)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--targets", default="waystation,rabbitmq")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--n", type=int, default=100000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--bench-dir", type=Path, default=sb.DEFAULT_BENCH_DIR)
    ap.add_argument(
        "--python",
        type=Path,
        default=sb.PEERS_PYTHON if sb.PEERS_PYTHON.exists() else Path(sys.executable),
    )
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for name in a.targets.split(","):
        b = broker(name, a)
        ready = b.start()
        print(f"[{name}] ready in {ready}s", file=sys.stderr, flush=True)
        try:
            for mode in a.modes.split(","):
                for _ in range(a.reps):
                    r = run_one(name, mode, a, b.pid)
                    print(f"[{name}] {mode}: {sb.brief(r)}", file=sys.stderr, flush=True)
                    results.setdefault(name, {}).setdefault(mode, []).append(r)
        finally:
            b.stop()
    names = list(results)
    print(f"\nSTOMP over WebSocket, N={a.n}, 100-byte bodies, median of {a.reps} (msg/s)\n")
    print("| mode | rate | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for mode in a.modes.split(","):
        for key in RATES:
            cells = []
            for n in names:
                vals = [r[key] for r in results[n].get(mode, []) if r.get(key)]
                cells.append(f"{statistics.median(vals):,.0f}" if vals else "–")
            if any(c != "–" for c in cells):
                print(f"| {mode} | {key} | " + " | ".join(cells) + " |")
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
