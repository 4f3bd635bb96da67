"""Live events end to end: a node with ``[node.event_log] publish_address`` publishes its
lifecycle events, and a streaming query through ``readStream.format("waystation")`` follows
a STOMP flow while it happens: every message's accepted, routed, delivered and acked."""

from __future__ import annotations

import time

import pytest
from nodekit import NodeProcess
from pyspark.sql import SparkSession

from waystation.core.events import spark_ddl
from waystation.pipeline.source import register
from waystation.pipeline.stomp_client import StompClient

pytestmark = pytest.mark.timeout(180)
FEED = '[node.event_log]\npublish_address = "ws.events"\n'


def test_a_streaming_query_follows_the_flow_live(spark: SparkSession, tmp_path):
    register(spark)
    node = NodeProcess(tmp_path / "node", extra_config=FEED).start()
    q = None
    try:
        # the feed's queue exists before the flow (a STOMP subscription would make it too)
        events = (
            spark.readStream.format("waystation")
            .option("port", str(node.stomp_port))
            .option("queue", "ws.events")
            .load()
            .selectExpr(f"from_json(CAST(body AS STRING), '{spark_ddl()}') AS e")
            .select("e.*")
        )
        q = events.writeStream.format("memory").queryName("live_events").start()

        c = StompClient("127.0.0.1", node.stomp_port)
        c.subscribe("/queue/orders", "orders", 0)
        c.send_many([({"destination": "/queue/orders"}, f"o{i}".encode()) for i in range(10)])
        ids: list[int] = []
        while len(ids) < 10:
            f = c.receive(10)
            assert f is not None, "the orders did not come back"
            ids.append(int(f.headers["message-id"]))
            c.ack([f.headers["ack"]])
        c.close()

        want = {(i, e) for i in ids for e in ("accepted", "routed", "delivered", "acked")}
        deadline = time.monotonic() + 90
        seen: set[tuple[int, str]] = set()
        while not want <= seen and time.monotonic() < deadline:
            assert q.isActive, q.exception()
            rows = spark.sql("SELECT message_id, event FROM live_events").collect()
            seen = {(r["message_id"], r["event"]) for r in rows}
            time.sleep(0.3)
        assert want <= seen
        addresses = {r["address"] for r in spark.sql("SELECT address FROM live_events").collect()}
        assert addresses == {"orders"}  # nothing about the feed's own address
    finally:
        if q is not None:
            q.stop()
        node.stop()
