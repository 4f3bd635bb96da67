"""Reconcile benchmark: N generated lifecycle events (default 10 million, Parquet, three
sites) reconciled on ``local[2]``; end-to-end time split by stage (JVM start, read, per
message status, summary, routes/latency, report).  Not a test: figures for
docs/performance.md.

    python bench/pipeline_bench.py                   # 10M events, local[2]
    python bench/pipeline_bench.py --events 1000000 --master 'local[2]' --json out.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from waystation.pipeline.generate import generate

EVENTS_PER_MESSAGE = 8.3  # what the generator's mix averages


def logs_for(events: int, cache: Path, fmt: str) -> tuple[Path, int]:
    """Generated logs of about ``events`` events, reused from ``cache`` when present."""
    messages = int(events / EVENTS_PER_MESSAGE)
    d = cache / f"{fmt}-{messages}"
    meta = d / "truth.json"
    if meta.exists():
        return d, json.loads(meta.read_text())["events"]
    shutil.rmtree(d, ignore_errors=True)
    t = time.perf_counter()
    k = max(1, messages // 10_000)
    truth = generate(
        d / "logs", messages, sites=3, fmt=fmt, minutes=60,
        faults={"lost": k, "duplicated": k, "dead_lettered": k, "expired": k, "in_flight": k},
    )  # fmt: skip
    meta.write_text(json.dumps({"events": truth.events, "messages": messages}))
    print(f"generated {truth.events} events in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return d, truth.events


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=10_000_000)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--format", default="parquet", choices=("parquet", "jsonl"))
    p.add_argument("--cache", default="/tmp/waystation-pipeline-bench")
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--journey", action="store_true", help="keep each message's hops too")
    p.add_argument("--json", help="write the figures here")
    a = p.parse_args()
    d, n = logs_for(a.events, Path(a.cache), a.format)

    t0 = time.perf_counter()
    from waystation.pipeline.events import read_events
    from waystation.pipeline.reconcile import reconcile
    from waystation.pipeline.session import spark_session

    spark = spark_session(a.master, driver_memory=a.driver_memory)
    jvm = time.perf_counter() - t0
    out = d / "out"
    result = reconcile(spark, read_events(spark, [d / "logs"]), out, journey=a.journey)
    total = time.perf_counter() - t0
    spark.stop()
    stages = {"spark_start": round(jvm, 2), **result.timings}
    figures = {
        "events": n,
        "messages": result.summary["messages"],
        "master": a.master,
        "format": a.format,
        "journey": a.journey,
        "seconds_total": round(total, 2),
        "events_per_second": round(n / total),
        "stages_s": stages,
        "status": result.summary["status"],
    }
    print(f"| {n:,} events, {a.master}, {a.format} | seconds |\n|---|---|")
    for k, v in stages.items():
        print(f"| {k} | {v:.1f} |")
    print(f"| **total** | **{total:.1f}** |")
    print(f"{n / total:,.0f} events/s; statuses {result.summary['status']}")
    if a.json:
        Path(a.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
