"""``waystation pipeline reconcile EVENTS... --out DIR``: the CLI face of the Spark jobs.

Imported by the node's CLI at start-up, so pyspark is imported only when a pipeline command
actually runs (a node never needs Spark).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any


def add_parser(subparsers: Any) -> None:
    """Register ``pipeline`` and its subcommands on the ``waystation`` parser."""
    p = subparsers.add_parser("pipeline", help="PySpark jobs over lifecycle event logs")
    sub = p.add_subparsers(dest="pipeline_command", required=True)
    r = sub.add_parser(
        "reconcile",
        help="per message status across nodes, flow per route, report.html",
        description="Reconcile the lifecycle event logs (JSON Lines or Parquet files or "
        "folders) of any number of nodes.",
    )
    r.add_argument("events", nargs="+", metavar="EVENTS", help="event log files or folders")
    r.add_argument("--out", required=True, metavar="DIR", help="output folder")
    r.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    r.add_argument("--shuffle-partitions", type=int, help="default: 4 per local core")
    r.add_argument("--driver-memory", default="2g", help="default 2g")
    r.add_argument("--no-journey", action="store_true", help="leave out each message's hops")
    r.add_argument("--quiet", action="store_true", help="no progress line")
    r.set_defaults(func=cmd_reconcile)


class Progress(threading.Thread):
    """One self-overwriting line on stderr: the job's phase and Spark's task counts."""

    def __init__(self, enabled: bool) -> None:
        super().__init__(daemon=True)
        self.enabled = enabled and sys.stderr.isatty()
        self.plain = enabled and not self.enabled
        self.phase = "starting Spark"
        self.sc: Any = None
        self.t0 = time.monotonic()
        self._halt = threading.Event()

    def say(self, phase: str) -> None:
        self.phase = phase
        if self.plain:
            print(f"[{time.monotonic() - self.t0:6.1f}s] {phase}", file=sys.stderr, flush=True)

    def run(self) -> None:
        while not self._halt.wait(0.25):
            tasks = ""
            if self.sc is not None:
                st = self.sc.statusTracker()
                done = total = 0
                for sid in st.getActiveStageIds():
                    info = st.getStageInfo(sid)
                    if info is not None:
                        done += info.numCompletedTasks
                        total += info.numTasks
                if total:
                    bar = "#" * int(20 * done / total)
                    tasks = f" [{bar:<20}] {done}/{total} tasks"
            line = f"\r[{time.monotonic() - self.t0:6.1f}s] {self.phase}{tasks}"
            sys.stderr.write(line[:120].ljust(100))
            sys.stderr.flush()

    def stop(self) -> None:
        self._halt.set()
        if self.enabled:
            self.join(1)
            sys.stderr.write("\n")


def cmd_reconcile(args: argparse.Namespace) -> int:
    progress = Progress(not args.quiet)
    if progress.enabled:
        progress.start()
    else:
        progress.say("starting Spark")
    try:
        from waystation.pipeline.events import read_events
        from waystation.pipeline.reconcile import reconcile
        from waystation.pipeline.session import spark_session

        spark = spark_session(
            args.master,
            shuffle_partitions=args.shuffle_partitions,
            driver_memory=args.driver_memory,
        )
        progress.sc = spark.sparkContext
        result = reconcile(
            spark,
            read_events(spark, args.events),
            args.out,
            journey=not args.no_journey,
            progress=progress.say,
        )
    except FileNotFoundError as e:
        progress.stop()
        print(f"waystation pipeline: {e}", file=sys.stderr)
        return 2
    progress.stop()
    s = result.summary
    status = s["status"]
    assert isinstance(status, dict)
    counts = ", ".join(f"{k} {v}" for k, v in status.items() if v)
    print(f"{s['messages']} messages from {s['events']} events: {counts}")
    print(f"tables, summary.json and report.html in {result.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m waystation.pipeline.cli reconcile ...`` (also what spark-submit runs)."""
    p = argparse.ArgumentParser(prog="waystation")
    add_parser(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(["pipeline", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
