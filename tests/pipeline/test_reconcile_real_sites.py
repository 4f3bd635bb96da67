"""Reconcile the event logs of two real nodes joined by a bridge: link cuts, a poisoned
message, messages left waiting, and a ``kill -9`` that takes non-durable messages with it.
The job must report exactly the losses, dead letters and waiting messages the test caused,
and every other message delivered."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from sitekit import collect, send_all, two_sites

from waystation.pipeline.events import read_events
from waystation.pipeline.reconcile import reconcile

pytestmark = pytest.mark.timeout(240)

EVENT_LOG = '\n[node.event_log]\nenabled = true\nformat = "jsonl"\n'


def logged(node_dir: Path, pred: object) -> int:
    """Records of the node's log (the open ``.part`` file too) for which ``pred`` holds."""
    n = 0
    for f in (node_dir / "data" / "events").glob("*events-*.jsonl*"):
        for line in f.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line being written
            n += bool(pred(rec))  # type: ignore[operator]
    return n


def wait_logged(node_dir: Path, pred: object, want: int, timeout: float = 10) -> None:
    end = time.monotonic() + timeout
    while logged(node_dir, pred) < want:
        assert time.monotonic() < end, f"{want} records not in the log of {node_dir}"
        time.sleep(0.1)


def test_two_sites_statuses_are_exactly_the_faults_caused(spark: SparkSession, tmp_path):
    sites = two_sites(
        tmp_path, a_extra=EVENT_LOG, b_extra=EVENT_LOG, b_limits={"max_body_size": "4KiB"}
    )
    a, b, proxy = sites.a, sites.b, sites.proxy
    try:
        # 1. durable orders through link cuts, one poisoned (too large for site-b), some held
        orders = [f"o{i}" for i in range(40)]
        sent = send_all(a.stomp_port, "site-b::orders", orders, batch=10,
                        between=lambda _i: proxy.cut())  # fmt: skip
        assert sent == orders
        assert send_all(a.stomp_port, "site-b::orders", ["x" * 8192]) == ["x" * 8192]
        held = [f"h{i}" for i in range(5)]
        assert send_all(a.stomp_port, "site-b::held", held) == held
        # 2. the link goes down; non-durable messages wait at site-a, which is killed
        proxy.refuse(True)
        proxy.cut()
        volatile = [f"v{i}" for i in range(5)]
        assert send_all(a.stomp_port, "site-b::orders", volatile,
                        headers={"persistent": "false"}) == volatile  # fmt: skip
        wait_logged(a.workdir, lambda r: r["event"] == "accepted" and r["durable"] is False, 5)
        a.kill9()
        # 3. site-a back, more orders, the link back: every durable order arrives
        a.start()
        later = [f"l{i}" for i in range(10)]
        assert send_all(a.stomp_port, "site-b::orders", later) == later
        proxy.refuse(False)
        got = collect(b.stomp_port, "orders", orders + later, timeout=60)
        assert sorted(got) == sorted(orders + later)  # no volatile one, nothing twice
        wait_logged(b.workdir, lambda r: r["event"] == "routed" and r["queue"] == "held", 5)
    finally:
        sites.stop()  # a clean stop completes both logs

    out = tmp_path / "out"
    result = reconcile(spark, read_events(spark, [a.workdir / "data" / "events",
                                                  b.workdir / "data" / "events"]), out)  # fmt: skip
    status = result.summary["status"]
    assert isinstance(status, dict)
    assert status == {
        "delivered": len(orders) + len(later),
        "in_flight": len(held),
        "lost": len(volatile),
        "expired": 0,
        "dead_lettered": 1,
        "duplicated": 0,
        "dropped": 0,
    }
    rows = spark.read.parquet(str(out / "messages")).collect()
    by = {s: [r for r in rows if r["status"] == s] for s in status}
    assert {r["address"] for r in by["in_flight"]} == {"site-b::held"}
    assert {(r["durable"], r["address"]) for r in by["lost"]} == {(False, "site-b::orders")}
    assert all("restarted" in r["detail"] for r in by["lost"])
    (dead,) = by["dead_lettered"]
    assert dead["reason"] == "message-too-large" and dead["origin_node"] == "site-a"
    assert all(r["nodes"] == ["site-a", "site-b"] for r in by["delivered"])
    assert result.summary["dead_letter_reasons"] == {"message-too-large": 1}
