"""Reconcile benchmark: N generated lifecycle events (default 10 million, Parquet, three
sites) reconciled on ``local[2]``; end-to-end time split by stage (JVM start, read, per
message status, summary, routes/latency, report).  Not a test: figures for
docs/performance.md.

    python bench/pipeline_bench.py                   # 10M events, local[2]
    python bench/pipeline_bench.py --events 1000000 --master 'local[2]' --json out.json
    python bench/pipeline_bench.py --source 100000  # the data source's rates instead

``--source N``: one real node; N messages written by ``writeStream.format("waystation")``
(STOMP, a receipt per message) and read back by ``readStream`` (acknowledged on commit),
then N/10 written and read by the batch source (REST, one request per message); messages per
second for each.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "gateway"))

from waystation.pipeline.generate import generate  # noqa: E402

EVENTS_PER_MESSAGE = 8.3  # what the generator's mix averages


def cpu_seconds() -> float:
    """CPU time of this process and its children so far (the JVM, Python workers): on a
    shared machine the wall time says as much about the neighbours as about the job."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            c = p.cpu_times()
        except psutil.Error:
            continue
        total += c.user + c.system
    return total


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
    faults = {st: sorted(ids) for st, ids in truth.status.items()}
    meta.write_text(json.dumps({"events": truth.events, "messages": messages, "faults": faults}))
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
    p.add_argument("--source", type=int, metavar="N", help="measure the data source instead")
    a = p.parse_args()
    if a.source:
        return source_rates(a)
    d, n = logs_for(a.events, Path(a.cache), a.format)

    c0 = cpu_seconds()
    t0 = time.perf_counter()
    from waystation.pipeline.events import read_events
    from waystation.pipeline.reconcile import reconcile
    from waystation.pipeline.session import spark_session

    spark = spark_session(a.master, driver_memory=a.driver_memory)
    jvm = time.perf_counter() - t0
    marks = [cpu_seconds()]  # CPU at each phase's start (the job says when one begins)
    out = d / "out"
    result = reconcile(
        spark, read_events(spark, [d / "logs"]), out, journey=a.journey,
        progress=lambda _s: marks.append(cpu_seconds()),
    )  # fmt: skip
    total = time.perf_counter() - t0
    cpu = cpu_seconds() - c0  # before stop(): the JVM's time goes with it
    faults = check_faults(spark, out, json.loads((d / "truth.json").read_text()))
    spark.stop()
    stages = {"spark_start": round(jvm, 2), **result.timings}
    # phases announced: read, messages, summary, routes, report (and the end)
    marks.append(c0 + cpu)
    stage_cpu = [marks[0] - c0] + [b - a for a, b in zip(marks[1:], marks[2:], strict=False)]
    cpu_by_stage = {k: round(v, 1) for k, v in zip(stages, stage_cpu, strict=False)}
    figures = {
        "events": n,
        "messages": result.summary["messages"],
        "master": a.master,
        "format": a.format,
        "journey": a.journey,
        "seconds_total": round(total, 2),
        "events_per_second": round(n / total),
        "cpu_seconds": round(cpu, 1),
        "stages_s": stages,
        "stages_cpu_s": cpu_by_stage,
        "load_average_1m": round(os.getloadavg()[0], 1),
        "status": result.summary["status"],
    }
    print(f"| {n:,} events, {a.master}, {a.format} | seconds | CPU seconds |\n|---|---|---|")
    for k, v in stages.items():
        print(f"| {k} | {v:.1f} | {cpu_by_stage.get(k, float('nan')):.1f} |")
    print(f"| **total** | **{total:.1f}** | **{cpu:.0f}** |")
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.1f}")
    print(f"{n / total:,.0f} events/s; CPU {cpu:.0f} s ({cpu / total:.2f} cores busy on average)")
    print(f"statuses {result.summary['status']}")
    print(faults)
    if a.json:
        Path(a.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def check_faults(spark: object, out: Path, truth: dict[str, object]) -> str:
    """The injected faults against what the job found (not timed): exactly the generated
    trace ids per status when the cache has them, else the counts per status."""
    from pyspark.sql import functions as F

    m = spark.read.parquet(str(out / "messages"))  # type: ignore[attr-defined]
    found: dict[str, set[str]] = {}
    for r in m.where(F.col("status") != "delivered").select("trace_id", "status").collect():
        found.setdefault(r["status"], set()).add(r["trace_id"])
    injected = truth.get("faults")
    if isinstance(injected, dict):
        want = {st: set(ids) for st, ids in injected.items()}
    else:  # a cache from before the ids were kept: the generator's count per kind
        k = max(1, int(truth["messages"]) // 10_000)  # type: ignore[call-overload]
        want = {
            st: {str(i) for i in range(k)}
            for st in ("lost", "duplicated", "dead_lettered", "expired", "in_flight")
        }
        found = {st: {str(i) for i in range(len(ids))} for st, ids in found.items()}
    n = sum(len(v) for v in want.values())
    ok = {st: ids for st, ids in found.items() if ids} == {
        st: ids for st, ids in want.items() if ids
    }
    how = "trace ids" if isinstance(injected, dict) else "counts"
    verdict = "all found, nothing else" if ok else f"MISMATCH: found {found}"
    return f"faults ({how}): {n} injected; {verdict}"


def source_rates(a: argparse.Namespace) -> int:
    """Messages per second through ``format("waystation")``, streaming and batch."""
    import tempfile

    from nodekit import NodeProcess
    from pyspark.sql import functions as F

    from waystation.pipeline.session import spark_session
    from waystation.pipeline.source import register

    n = a.source
    tmp = Path(tempfile.mkdtemp(prefix="ws-source-bench-"))
    # a micro-batch holds at most max_window unacknowledged messages (default 1000)
    window = "[limits]\nmax_window = 20000\n"
    node = NodeProcess(tmp / "node", window, http=True, log_level="WARNING").start()
    spark = spark_session(a.master, driver_memory=a.driver_memory)
    register(spark)
    figures: dict[str, object] = {"master": a.master, "messages": n}
    try:
        rows = spark.range(n).select(
            F.concat(F.lit("order "), F.col("id").cast("string")).alias("body"),
            F.struct(F.col("id").alias("n"), (F.col("id") % 2 == 0).alias("even")).alias(
                "properties"
            ),
        )
        rows.write.parquet(str(tmp / "rows"))
        stomp = {"port": str(node.stomp_port), "queue": "bench"}
        t = time.perf_counter()
        q = (
            spark.readStream.schema(rows.schema).parquet(str(tmp / "rows"))
            .writeStream.format("waystation").options(**stomp)
            .option("checkpointLocation", str(tmp / "cp-w")).trigger(availableNow=True).start()
        )  # fmt: skip
        q.awaitTermination()
        figures["stream_write_msgs_s"] = round(n / (time.perf_counter() - t))

        got = [0, 0]  # rows, batches

        def count(df: object, _batch: int) -> None:
            got[0] += df.count()  # type: ignore[attr-defined]
            got[1] += 1

        t = time.perf_counter()
        q = (
            spark.readStream.format("waystation").options(**stomp).load()
            .writeStream.foreachBatch(count).option("checkpointLocation", str(tmp / "cp-r"))
            .start()
        )  # fmt: skip
        while got[0] < n:
            if not q.isActive:
                raise SystemExit(f"read stopped: {q.exception()}")
            time.sleep(0.1)
        figures["stream_read_msgs_s"] = round(n / (time.perf_counter() - t))
        figures["stream_read_batches"] = got[1]
        q.stop()

        m = max(1, n // 10)
        rest = {"url": node.http_url, "queue": "bench-rest"}
        t = time.perf_counter()
        spark.range(m).select(F.col("id").cast("string").alias("body")).repartition(2).write.format(
            "waystation"
        ).options(**rest).mode("append").save()
        figures["batch_write_msgs_s"] = round(m / (time.perf_counter() - t))
        t = time.perf_counter()
        read = spark.read.format("waystation").options(**rest, wait="0.5").load().count()
        figures["batch_read_msgs_s"] = round(read / (time.perf_counter() - t - 0.5))
        figures["batch_messages"] = m
    finally:
        spark.stop()
        node.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print("| data source | messages/s |\n|---|---|")
    for k, v in figures.items():
        if k.endswith("_msgs_s"):
            print(f"| {k.removesuffix('_msgs_s').replace('_', ' ')} | {v:,} |")
    if a.json:
        Path(a.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
