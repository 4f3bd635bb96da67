"""MQTT and AMQP 1.0 benchmark: Waystation beside mosquitto / RabbitMQ, in one sitting.

Each target is started alone (they share the default ports 1883 and 5672), then
``../shared/bench/bench.py mqtt|amqp`` runs ``--reps`` times per scenario; the table shows the
median end-to-end rate, the broker's CPU per message (its process tree's CPU seconds over
the messages moved: the figure least moved by other load on the machine) and the harness
client's (its CPU in the send and drain phases over the messages: one second over it is the
rate the client itself could not pass).

  python bench/protocol_bench.py --protocol mqtt --targets waystation,mosquitto
  python bench/protocol_bench.py --protocol amqp --targets waystation,rabbitmq --n 20000
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stomp_bench import PeerBroker, WaystationBroker, run_client  # noqa: E402

SCENARIOS: dict[str, dict[str, list[str]]] = {
    "mqtt": {
        "QoS 0": ["--qos", "0"],
        "QoS 1, window 100": ["--qos", "1", "--inflight", "100"],
    },
    "amqp": {
        "pre-settled": ["--presettle"],
        "unsettled, durable": ["--durable"],
    },
}
PORTS = {"mqtt": 1883, "amqp": 5672}


def rate(r: dict[str, Any]) -> float | None:
    for key in ("e2e_msgs_per_s", "e2e_rate", "e2e"):
        v = r.get(key)
        if isinstance(v, int | float):
            return float(v)
    return None


def client_cpu_s(r: dict[str, Any]) -> float | None:
    """The harness client's CPU seconds in a run's send and drain phases (AMQP reports
    both): when one second over it per message is near the rate, the client and not the
    broker is the limit."""
    send, recv = r.get("send_client_cpu_s"), r.get("recv_client_cpu_s")
    return None if send is None or recv is None else float(send) + float(recv)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--protocol", choices=sorted(SCENARIOS), required=True)
    p.add_argument("--targets", default="waystation")
    p.add_argument("--n", type=int, default=50000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--bench-dir", type=Path, default=Path("../shared/bench"))
    p.add_argument("--client-python", default=sys.executable, help="Python that runs bench.py")
    p.add_argument(
        "--waystation-python", default=None, help="an installed node's Python (default: REPO)"
    )
    a = p.parse_args()
    bench = a.bench_dir.resolve() / "bench.py"
    rows: list[str] = []
    for target in a.targets.split(","):
        broker = (
            WaystationBroker(None, 61613, 60, False, a.waystation_python)
            if target == "waystation"
            else PeerBroker(target, a.bench_dir.resolve(), 120)
        )
        ready = broker.start()
        try:
            for name, args in SCENARIOS[a.protocol].items():
                extra = ["--address", "/queue/bench"] if a.protocol == "amqp" else []
                cmd = [a.client_python, str(bench), a.protocol, "--port", str(PORTS[a.protocol])]
                cmd += ["--n", str(a.n), "--timeout", str(a.timeout), *args, *extra]
                runs = [run_client(cmd, broker.pid, a.timeout) for _ in range(a.reps)]
                rates = [r for r in (rate(x) for x in runs) if r]
                cpu = [
                    x["broker_cpu_pct"] / 100 * x["harness_wall_s"] / a.n * 1e6
                    for x in runs
                    if x.get("broker_cpu_pct") is not None
                ]
                client = [c / a.n * 1e6 for c in map(client_cpu_s, runs) if c is not None]
                errors = [x.get("error") for x in runs if x.get("error") or x.get("timed_out")]
                med = f"{statistics.median(rates):,.0f}" if rates else "-"
                spread = f"{min(rates):,.0f}-{max(rates):,.0f}" if rates else "-"
                us = f"{statistics.median(cpu):.1f}" if cpu else "-"
                cus = f"{statistics.median(client):.1f}" if client else "-"
                note = f"{len(errors)} incomplete: {str(errors[0])[:80]}" if errors else ""
                rows.append(f"| {target} | {name} | {med} ({spread}) | {us} | {cus} | {note} |")
                print(rows[-1], file=sys.stderr, flush=True)
        finally:
            broker.stop()
        print(f"[{target}] ready {ready}s", file=sys.stderr)
    print(f"\n{a.protocol}, n={a.n}, medians of {a.reps}\n")
    print(
        "| target | scenario | e2e msg/s (range) | broker CPU µs/msg | client CPU µs/msg | note |"
    )
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
