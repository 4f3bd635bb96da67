"""The reconcile job over generated logs with known faults finds exactly those, and the
schema it reads is the core's."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.json as pj
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from waystation.core.events import FIELDS, arrow_schema, spark_ddl
from waystation.pipeline.cli import main as cli_main
from waystation.pipeline.events import SCHEMA, read_events
from waystation.pipeline.generate import FAULTS, Truth, generate
from waystation.pipeline.reconcile import STATUSES, reconcile

pytestmark = pytest.mark.timeout(300)

FAULT_COUNTS = {"lost": 3, "duplicated": 4, "dead_lettered": 5, "expired": 2, "in_flight": 6}


def test_schema_is_the_cores_field_for_field(spark):
    assert [f.name for f in SCHEMA.fields] == [f.name for f in FIELDS]
    assert [f.nullable for f in SCHEMA.fields] == [f.nullable for f in FIELDS]
    assert SCHEMA.simpleString() == SCHEMA.fromDDL(spark_ddl()).simpleString()


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Truth]:
    logs = tmp_path_factory.mktemp("logs")
    truth = generate(logs, 1500, sites=3, faults=FAULT_COUNTS, seed=7)
    # one node's log in Parquet, the others in JSON Lines: one read takes both
    src = logs / "site-c" / "events-000001.jsonl"
    table = pj.read_json(src).select([f.name for f in FIELDS]).cast(arrow_schema())
    pq.write_table(table, logs / "site-c" / "events-000001.parquet")
    src.unlink()
    return logs, truth


@pytest.fixture(scope="module")
def reconciled(spark: SparkSession, generated: tuple[Path, Truth], tmp_path_factory):
    logs, truth = generated
    out = tmp_path_factory.mktemp("out")
    result = reconcile(spark, read_events(spark, [logs]), out)
    return out, result, truth


def test_every_injected_fault_is_found_and_nothing_else(spark, reconciled):
    out, result, truth = reconciled
    msgs = spark.read.parquet(str(out / "messages"))
    found: dict[str, set[str]] = {s: set() for s in STATUSES}
    for r in msgs.select("trace_id", "status").collect():
        found[r["status"]].add(r["trace_id"])
    for fault in FAULTS:
        assert found[fault] == truth.status[fault], fault
    assert len(found["delivered"]) == truth.count("delivered")
    assert not found["dropped"]
    assert result.summary["events"] == truth.events
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == {s: len(found[s]) for s in STATUSES}
    assert summary["dead_letter_reasons"] == {"max-deliveries": FAULT_COUNTS["dead_lettered"]}


def test_messages_carry_origin_reason_and_journey(spark, reconciled):
    out, _, truth = reconciled
    msgs = spark.read.parquet(str(out / "messages"))
    dead = msgs.where(F.col("status") == "dead_lettered").collect()
    assert {r["reason"] for r in dead} == {"max-deliveries"}
    row = msgs.where(F.col("trace_id") == sorted(truth.status["duplicated"])[0]).first()
    assert row is not None
    assert row["origin_node"] == row["trace_id"].split("/")[0]
    hops = [(h["node"], h["event"]) for h in row["journey"]]
    assert hops[0] == (row["origin_node"], "accepted")
    assert sum(1 for _, e in hops if e == "acked") == 3  # the bridge's, then two at the remote
    anomalies = {r["trace_id"] for r in spark.read.parquet(str(out / "anomalies")).collect()}
    assert anomalies == truth.status["lost"] | truth.status["duplicated"]


def test_routes_latency_and_backlog(spark, reconciled):
    out, _, truth = reconciled
    routes = spark.read.parquet(str(out / "routes"))
    # one acknowledged destination per delivered or duplicated message (a duplicate's queue
    # counts once); dead-lettered, expired, lost and waiting ones have none
    acked = routes.agg(F.sum("acknowledged")).first()[0]
    assert acked == truth.count("delivered") + len(truth.status["duplicated"])
    lat = spark.read.parquet(str(out / "latency"))
    stages = {r["stage"] for r in lat.select("stage").distinct().collect()}
    assert stages == {"forward", "remote_accept", "delivery", "ack"}
    bad = lat.where(
        (F.col("p50_ms") > F.col("p95_ms"))
        | (F.col("p95_ms") > F.col("p99_ms"))
        | (F.col("p99_ms") > F.col("max_ms"))
        | (F.col("p50_ms") < 0)
    )
    assert bad.count() == 0
    backlog = spark.read.parquet(str(out / "backlog"))
    assert backlog.where(F.col("backlog") < 0).count() == 0
    # what stays in the store-and-forward queues at the end is what was never forwarded
    last = backlog.groupBy("node", "queue").agg(F.max_by("backlog", "minute").alias("b"))
    assert last.agg(F.sum("b")).first()[0] <= len(truth.status["in_flight"])


def test_report_is_one_self_contained_page(reconciled):
    out, _, _ = reconciled
    page = (out / "report.html").read_text()
    assert page.count("<svg") >= 4
    assert "src=" not in page and "href=" not in page and "<script" not in page
    assert "Lost and duplicated" in page


def test_cli_runs_the_same_job(generated, tmp_path, capsys):
    logs, truth = generated
    code = cli_main(
        ["reconcile", str(logs / "site-a"), str(logs / "site-b"), str(logs / "site-c"),
         "--out", str(tmp_path / "o"), "--master", "local[2]", "--quiet", "--no-journey"]
    )  # fmt: skip
    assert code == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["status"]["lost"] == len(truth.status["lost"])
    assert summary["status"]["duplicated"] == len(truth.status["duplicated"])
    assert "1500 messages" in capsys.readouterr().out


def test_missing_logs_are_an_error_not_an_empty_report(tmp_path, capsys):
    assert cli_main(["reconcile", str(tmp_path), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "no event log" in capsys.readouterr().err
