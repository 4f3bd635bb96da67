#!/usr/bin/env python3
"""Before/after runs of ``stomp_bench.py`` and the MQTT ``protocol_bench.py``, alternating.

Two installed builds (each a venv's python after ``pip install .``) take turns, round after
round, in the order A B, B A, A B, ... so that a drift in the machine's load (or its disk
cache) falls on both equally.  Each turn runs the benchmarks as they are, as subprocesses
(one measured rep each; ``--stomp-args`` and ``--mqtt-args`` pass anything else on), and
this script only collects their figures: per row the median of the rounds for each build,
and the change.  A row more than ``--threshold`` % worse (a lower rate, more node CPU per
message) is flagged ⚠.

  python bench/ab_compare.py --before /tmp/venv-before/bin/python \\
      --after /tmp/venv-after/bin/python --rounds 3 --json ab.json
  python bench/ab_compare.py --before B --after A --rounds 1 \\
      --stomp-args="--quick" --mqtt-args="--n 2000"             # a smoke run
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
BENCH_DIR = BENCH.parent.parent / "shared" / "bench"  # bench.py, as stomp_bench's default
RATES = {"send_rate": "send msg/s", "recv_rate": "recv msg/s", "e2e_rate": "e2e msg/s"}
RATES_CONCURRENT = {"send_rate": "16 producers msg/s", "single_rate": "1 producer msg/s"}
CPU = "node CPU µs/msg"
Row = tuple[str, str, str]  # (bench, scenario, metric)


def _run(cmd: list[str], timeout: float) -> str:
    print("$ " + shlex.join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=BENCH.parent)
    sys.stderr.write(r.stderr[-2000:])
    if r.returncode != 0:
        print(f"  (exit {r.returncode})", file=sys.stderr)
    return r.stdout


def stomp_turn(python: str, extra: list[str], timeout: float) -> dict[Row, float]:
    """One stomp_bench.py sitting of the node installed for ``python``: its rates and node
    CPU per message by scenario."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "stomp.json"
        cmd = [sys.executable, str(BENCH / "stomp_bench.py"), "--target", "waystation"]
        cmd += ["--waystation-python", python, "--reps", "1", "--json", str(out), *extra]
        _run(cmd, timeout)
        if not out.exists():
            return {}
        doc = json.loads(out.read_text())
    rows: dict[Row, float] = {}
    for key, e in doc["targets"].get("waystation", {}).get("scenarios", {}).items():
        summary = e.get("summary") or {}
        names = RATES_CONCURRENT if key == "concurrent-sync" else RATES
        for metric, label in names.items():
            if metric in summary:
                rows[("stomp", key, label)] = summary[metric]["median"]
        cpu = [
            r["broker_cpu_pct"] / 100 * r["harness_wall_s"] / e["n"] * 1e6
            for r in e.get("runs", [])
            if r.get("broker_cpu_pct") is not None and e.get("n")
        ]
        if cpu:
            rows[("stomp", key, CPU)] = statistics.median(cpu)
    return rows


def _number(cell: str) -> float | None:
    head = cell.strip().split(" ")[0].replace(",", "")
    try:
        return float(head)
    except ValueError:
        return None  # "-": no figure


def mqtt_turn(python: str, extra: list[str], timeout: float) -> dict[Row, float]:
    """One protocol_bench.py --protocol mqtt sitting: e2e rate and node CPU per scenario,
    read from its Markdown table (| target | scenario | e2e (range) | broker CPU | ...)."""
    cmd = [sys.executable, str(BENCH / "protocol_bench.py"), "--protocol", "mqtt"]
    cmd += ["--targets", "waystation", "--waystation-python", python, "--reps", "1"]
    cmd += ["--bench-dir", str(BENCH_DIR), *extra]
    rows: dict[Row, float] = {}
    for line in _run(cmd, timeout).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0] == "waystation":
            for label, cell in (("e2e msg/s", cells[2]), (CPU, cells[3])):
                if (v := _number(cell)) is not None:
                    rows[("mqtt", cells[1], label)] = v
    return rows


def change(before: float, after: float, metric: str) -> tuple[float, bool]:
    """% change after vs before, and whether it is a slowdown beyond the threshold's sign."""
    pct = 100 * (after - before) / before if before else 0.0
    return pct, (pct > 0 if metric == CPU else pct < 0)


def table(runs: dict[str, list[dict[Row, float]]], threshold: float) -> str:
    lines = [
        "| bench | scenario | metric | before: median (rounds) | after: median (rounds) | change |",
        "|---|---|---|---|---|---|",
    ]
    order: list[Row] = []
    for turn in runs["before"] + runs["after"]:
        order += [r for r in turn if r not in order]
    for row in order:
        vals = {b: [t[row] for t in runs[b] if row in t] for b in ("before", "after")}
        cells = []
        for b in ("before", "after"):
            v = vals[b]
            digits = 1 if row[2] == CPU else 0
            cells.append(
                f"{statistics.median(v):,.{digits}f} ({', '.join(f'{x:,.{digits}f}' for x in v)})"
                if v
                else "–"
            )
        text = "–"
        if vals["before"] and vals["after"]:
            pct, worse = change(
                statistics.median(vals["before"]), statistics.median(vals["after"]), row[2]
            )
            text = f"{pct:+.1f} %" + (" ⚠" if worse and abs(pct) > threshold else "")
        lines.append(f"| {row[0]} | {row[1]} | {row[2]} | {cells[0]} | {cells[1]} | {text} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="python of the build before (a venv's)")
    ap.add_argument("--after", required=True, help="python of the build after")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=("stomp", "mqtt"), help="run one of the two benchmarks")
    ap.add_argument("--stomp-args", default="", help="more stomp_bench.py arguments")
    ap.add_argument("--mqtt-args", default="", help="more protocol_bench.py arguments")
    ap.add_argument("--threshold", type=float, default=5.0, help="flag rows worse by this %%")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per benchmark run")
    ap.add_argument("--json", type=Path, help="also write every round's figures here")
    a = ap.parse_args()
    builds = {"before": a.before, "after": a.after}
    runs: dict[str, list[dict[Row, float]]] = {"before": [], "after": []}
    for rnd in range(a.rounds):
        for name in ("before", "after") if rnd % 2 == 0 else ("after", "before"):
            print(f"== round {rnd + 1}/{a.rounds}: {name}", file=sys.stderr, flush=True)
            turn: dict[Row, float] = {}
            if a.only != "mqtt":
                turn.update(stomp_turn(builds[name], shlex.split(a.stomp_args), a.timeout))
            if a.only != "stomp":
                turn.update(mqtt_turn(builds[name], shlex.split(a.mqtt_args), a.timeout))
            runs[name].append(turn)
            if a.json:
                doc: dict[str, Any] = {
                    "builds": builds,
                    "runs": {
                        b: [{" | ".join(k): v for k, v in t.items()} for t in runs[b]] for b in runs
                    },  # fmt: skip
                }
                a.json.write_text(json.dumps(doc, indent=1))
    print(f"\nbefore: {a.before}\nafter: {a.after}\n{a.rounds} rounds, alternating\n")
    print(table(runs, a.threshold))
    return 0


if __name__ == "__main__":
    sys.exit(main())
