"""The status rules on small hand-written logs: the cases generated logs do not reach."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from waystation.pipeline.events import SCHEMA
from waystation.pipeline.reconcile import reconcile

pytestmark = pytest.mark.timeout(120)

T = 1_795_000_000_000_000  # µs
RUN1 = (T // 1000 - 60_000) << 16  # ids of a run started a minute earlier
RUN2 = (T // 1000 + 5_000) << 16  # ids of the run after a restart 5 s later


def ev(node: str, event: str, trace: str, mid: int, ts: int, queue: str | None = None,
       durable: bool = True, address: str = "orders", **kw: object) -> tuple[object, ...]:  # fmt: skip
    return (1, T + ts, node, event, trace, mid, address, queue, None, None, 100, durable,
            None, kw.get("reason"), kw.get("peer"))  # fmt: skip


def statuses(spark: SparkSession, rows: list[tuple[object, ...]], out: Path) -> dict[str, str]:
    r = reconcile(spark, spark.createDataFrame(rows, SCHEMA), out, journey=False)
    assert r.summary["messages"] == len({row[4] for row in rows})
    m = spark.read.parquet(str(out / "messages")).collect()
    return {x["trace_id"]: f"{x['status']}:{x['reason'] or ''}" for x in m}


def test_rules(spark: SparkSession, tmp_path: Path):
    a, b = "site-a", "site-b"
    rows = [
        # non-durable, waiting in a queue when site-a restarted: lost; durable: still there
        ev(a, "accepted", "site-a/1", RUN1 + 1, 0, durable=False),
        ev(a, "routed", "site-a/1", RUN1 + 1, 10, "orders", durable=False),
        ev(a, "accepted", "site-a/2", RUN1 + 2, 0),
        ev(a, "routed", "site-a/2", RUN1 + 2, 10, "orders"),
        # after the restart: a new message delivered (its id shows the new run)
        ev(a, "accepted", "site-a/3", RUN2 + 1, 6_000_000),
        ev(a, "routed", "site-a/3", RUN2 + 1, 6_000_010, "orders"),
        ev(a, "delivered", "site-a/3", RUN2 + 1, 6_000_020, "orders"),
        ev(a, "acked", "site-a/3", RUN2 + 1, 6_000_030, "orders"),
        # forwarded to site-b (whose log is here) and never accepted there: lost
        ev(a, "accepted", "site-a/4", RUN1 + 4, 0, address="site-b::orders"),
        ev(a, "routed", "site-a/4", RUN1 + 4, 10, "sf.site-b"),
        ev(a, "forwarded", "site-a/4", RUN1 + 4, 20, "sf.site-b", peer=b),
        # forwarded to site-z, whose log is not given: in flight as far as the logs go
        ev(a, "accepted", "site-a/5", RUN1 + 5, 0, address="site-z::orders"),
        ev(a, "routed", "site-a/5", RUN1 + 5, 10, "sf.site-z"),
        ev(a, "forwarded", "site-a/5", RUN1 + 5, 20, "sf.site-z", peer="site-z"),
        # the forwarded record lost with a crashed writer: site-b's log shows it arrived
        ev(a, "accepted", "site-a/6", RUN1 + 6, 0, address="site-b::orders"),
        ev(a, "routed", "site-a/6", RUN1 + 6, 10, "sf.site-b"),
        ev(b, "accepted", "site-a/6", 77, 30),
        ev(b, "routed", "site-a/6", 77, 40, "orders"),
        ev(b, "acked", "site-a/6", 77, 50, "orders"),
        # multicast to two queues: one acknowledged twice is a duplicate
        ev(b, "accepted", "site-b/8", 80, 0),
        ev(b, "routed", "site-b/8", 80, 1, "q1"),
        ev(b, "routed", "site-b/8", 80, 1, "q2"),
        ev(b, "acked", "site-b/8", 80, 5, "q1"),
        ev(b, "acked", "site-b/8", 80, 6, "q2"),
        ev(b, "acked", "site-b/8", 80, 7, "q2"),
        # refused before routing (no bridge to the node): dead-lettered, no queue
        ev(b, "dead_lettered", "site-b/9", 90, 0, reason="invalid-remote-node"),
        # only a drop: no route
        ev(b, "accepted", "site-b/10", 100, 0),
        ev(b, "dropped", "site-b/10", 100, 1, reason="no-route"),
        # accepted, then nothing: lost
        ev(b, "accepted", "site-b/11", 110, 0),
    ]
    assert statuses(spark, rows, tmp_path) == {
        "site-a/1": "lost:",
        "site-a/2": "in_flight:",
        "site-a/3": "delivered:",
        "site-a/4": "lost:",
        "site-a/5": "in_flight:",
        "site-a/6": "delivered:",
        "site-b/8": "duplicated:",
        "site-b/9": "dead_lettered:invalid-remote-node",
        "site-b/10": "dropped:no-route",
        "site-b/11": "lost:",
    }
