"""The fast plan (number-only aggregates, the few traces with a detail text judged again)
writes exactly the rows of the plain one, on generated logs and on the rule cases that
take its slow path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from waystation.pipeline import reconcile as R
from waystation.pipeline.events import SCHEMA, read_events
from waystation.pipeline.generate import generate

pytestmark = pytest.mark.timeout(300)

T = 1_795_000_000_000_000  # µs
RUN1 = (T // 1000 - 60_000) << 16
RUN2 = (T // 1000 + 5_000) << 16


def ev(node: str, event: str, trace: str, mid: int, ts: int, queue: str | None = None,
       durable: bool = True, **kw: object) -> tuple[object, ...]:  # fmt: skip
    return (1, T + ts, node, event, trace, mid, kw.get("address", "orders"), queue, None, None,
            100, durable, None, kw.get("reason"), kw.get("peer"))  # fmt: skip


def rows(out: Path, table: str, spark: SparkSession) -> DataFrame:
    df = spark.read.parquet(str(out / table))
    # a message's destinations: the same set, the order is the plan's
    return df.select(
        *[F.array_sort(c).alias(c) if c == "destinations" else F.col(c) for c in df.columns]
    )


def same_output(spark: SparkSession, events: DataFrame, tmp: Path, journey: bool) -> int:
    fast, plain = tmp / "fast", tmp / "plain"
    a = R.reconcile(spark, events, fast, journey=journey)
    b = R.reconcile(spark, events, plain, journey=journey, fast=False)
    assert a.summary == b.summary
    for table in ("messages", "anomalies", "routes", "latency", "dead_letters", "backlog"):
        x, y = rows(fast, table, spark), rows(plain, table, spark)
        assert x.schema.simpleString() == y.schema.simpleString(), table
        assert x.exceptAll(y).count() == 0 and y.exceptAll(x).count() == 0, table
    assert json.loads((fast / "summary.json").read_text()) == b.summary
    return int(a.summary["messages"])  # type: ignore[call-overload]


@pytest.mark.parametrize("journey", [False, True])
def test_generated_logs(spark: SparkSession, tmp_path: Path, journey: bool):
    faults = {"lost": 6, "duplicated": 6, "dead_lettered": 4, "expired": 3, "in_flight": 6}
    generate(tmp_path / "logs", 1200, sites=3, faults=faults, seed=5)
    assert same_output(spark, read_events(spark, [tmp_path / "logs"]), tmp_path, journey) == 1200


def test_rule_cases_and_many_nodes(spark: SparkSession, tmp_path: Path, monkeypatch):
    a, b, c = "site-a", "site-b", "site-c"
    data = [
        # non-durable hop waiting in sf.site-b when site-a restarted, yet site-b has it:
        # delivered, with a detail text (the fast plan hands it to the plain one)
        ev(a, "accepted", "site-a/1", RUN1 + 1, 0, durable=False, address="site-b::orders"),
        ev(a, "routed", "site-a/1", RUN1 + 1, 10, "sf.site-b", durable=False),
        ev(b, "accepted", "site-a/1", 11, 30, durable=False),
        ev(b, "routed", "site-a/1", 11, 40, "orders", durable=False),
        ev(b, "acked", "site-a/1", 11, 50, "orders", durable=False),
        ev(a, "accepted", "site-a/2", RUN2 + 1, 6_000_000),
        ev(a, "routed", "site-a/2", RUN2 + 1, 6_000_010, "orders"),
        ev(a, "acked", "site-a/2", RUN2 + 1, 6_000_030, "orders"),
        # three destination queues, each acknowledged once: delivered
        ev(c, "accepted", "site-c/3", 30, 0),
        *[ev(c, "routed", "site-c/3", 30, 1, q) for q in ("q1", "q2", "q3")],
        *[ev(c, "acked", "site-c/3", 30, 5 + i, q) for i, q in enumerate(("q1", "q2", "q3"))],
        # two destination queues, one on the remote node
        ev(c, "accepted", "site-c/4", 40, 0, address="fan"),
        ev(c, "routed", "site-c/4", 40, 1, "q1"),
        ev(c, "routed", "site-c/4", 40, 1, "sf.site-a"),
        ev(c, "forwarded", "site-c/4", 40, 3, "sf.site-a", peer=a),
        ev(c, "acked", "site-c/4", 40, 4, "sf.site-a"),
        ev(c, "acked", "site-c/4", 40, 6, "q1"),
        ev(a, "accepted", "site-c/4", RUN2 + 4, 9),
        ev(a, "routed", "site-c/4", RUN2 + 4, 10, "q1"),
        ev(a, "acked", "site-c/4", RUN2 + 4, 12, "q1"),
        # a trace id without an origin: the origin is where it was first accepted
        ev(b, "accepted", "plain-id", 50, 0),
        ev(b, "routed", "plain-id", 50, 1, "orders"),
        ev(b, "acked", "plain-id", 50, 2, "orders"),
        # forwarded to a node whose log is not given, and one never accepted at site-b
        ev(a, "accepted", "site-a/6", RUN2 + 6, 0, address="site-z::orders"),
        ev(a, "routed", "site-a/6", RUN2 + 6, 1, "sf.site-z"),
        ev(a, "forwarded", "site-a/6", RUN2 + 6, 2, "sf.site-z", peer="site-z"),
        ev(a, "accepted", "site-a/7", RUN2 + 7, 0, address="site-b::orders"),
        ev(a, "routed", "site-a/7", RUN2 + 7, 1, "sf.site-b"),
        ev(a, "forwarded", "site-a/7", RUN2 + 7, 2, "sf.site-b", peer=b),
        # dead-lettered before routing, dropped, routed nowhere
        ev(b, "dead_lettered", "site-b/8", 80, 0, reason="invalid-remote-node"),
        ev(b, "accepted", "site-b/9", 90, 0),
        ev(b, "dropped", "site-b/9", 90, 1, reason="no-route"),
        ev(b, "accepted", "site-b/10", 100, 0),
    ]
    events = spark.createDataFrame(data, SCHEMA)
    assert same_output(spark, events, tmp_path / "table", journey=False) == 10
    # the node lists built from the bits instead of the table of subsets
    monkeypatch.setattr(R, "SUBSET_TABLE_NODES", 0)
    assert same_output(spark, events, tmp_path / "bits", journey=True) == 10
