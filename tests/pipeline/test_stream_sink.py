"""``writeStream.format("waystation")``: each row becomes a message (body, typed properties,
destination) and a micro-batch commits only once the node confirmed every message; a batch
the node refuses fails the query and leaves no commit in the checkpoint.  The streaming
source reads the typed messages back."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pytest
from nodekit import NodeProcess
from pyspark.sql import SparkSession
from pyspark.sql.utils import StreamingQueryException

from waystation.pipeline.source import register
from waystation.pipeline.stomp_client import StompClient
from waystation.wire.stomp import Frame

pytestmark = pytest.mark.timeout(180)
CLOSED = (
    '[address_settings."closed.#"]\nauto_create_queues = false\nauto_create_addresses = false\n'
)
ROW_SCHEMA = (
    "body STRING, destination STRING, "
    "properties STRUCT<n: INT, big: LONG, urgent: BOOLEAN, price: DOUBLE, at: TIMESTAMP, tag: STRING>"
)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(tmp_path_factory.mktemp("spark-stream"), extra_config=CLOSED).start()
    yield n
    n.stop()


def drain(port: int, dest: str, expect: int) -> list:
    c = StompClient("127.0.0.1", port)
    c.subscribe(dest, "check", 0)
    frames: list[Frame] = []
    deadline = time.monotonic() + 20
    while len(frames) < expect and time.monotonic() < deadline:
        if (f := c.receive(0.5)) is not None:
            frames.append(f)
            c.ack([f.headers["ack"]])
    while (f := c.receive(0.3)) is not None:  # nothing more than expected
        frames.append(f)
    c.close()
    return frames


def write_stream(spark: SparkSession, rows: list[tuple], tmp: Path, port: int):
    src = tmp / "in"
    spark.createDataFrame(rows, ROW_SCHEMA).coalesce(1).write.mode("overwrite").parquet(str(src))
    return (
        spark.readStream.schema(ROW_SCHEMA)
        .parquet(str(src))
        .writeStream.format("waystation")
        .option("port", str(port))
        .option("queue", "typed")
        .option("checkpointLocation", str(tmp / f"cp-{port}"))
        .trigger(availableNow=True)
        .start()
    )


def test_rows_become_typed_messages_at_their_destinations(
    spark: SparkSession, node: NodeProcess, tmp_path: Path
):
    register(spark)
    at = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.UTC)
    rows = [
        (f"m{i}", None if i % 2 else "/queue/typed.odd-even",
         (i, 2**40 + i, i % 3 == 0, i / 4, at, f"t{i}"))
        for i in range(40)
    ]  # fmt: skip
    q = write_stream(spark, rows, tmp_path, node.stomp_port)
    assert q.awaitTermination(120)
    assert q.exception() is None
    assert (tmp_path / f"cp-{node.stomp_port}" / "commits" / "0").exists()

    # by the time the batch committed, every message was on the node
    odd = drain(node.stomp_port, "/queue/typed", 20)
    even = drain(node.stomp_port, "/queue/typed.odd-even", 20)
    assert sorted(f.body for f in odd) == sorted(f"m{i}".encode() for i in range(1, 40, 2))
    assert sorted(f.body for f in even) == sorted(f"m{i}".encode() for i in range(0, 40, 2))
    f = next(f for f in even if f.body == b"m6")
    h = f.headers
    assert (h["n"], h["big"], h["urgent"], h["price"], h["tag"]) == (
        "6",
        str(2**40 + 6),
        "true",
        "1.5",
        "t6",
    )
    assert h["at"] == str(int(at.timestamp() * 1000))
    types = dict(kv.split("=") for kv in h["ws-types"].split(","))
    assert types == {"n": "int", "big": "long", "urgent": "bool", "price": "double",
                     "at": "timestamp"}  # fmt: skip
    assert h["persistent"] == "true"


def test_a_batch_the_node_refuses_never_commits(
    spark: SparkSession, node: NodeProcess, tmp_path: Path
):
    register(spark)
    rows = [(f"m{i}", "/queue/closed.nowhere" if i == 7 else None, None) for i in range(10)]
    q = write_stream(spark, rows, tmp_path, node.stomp_port)
    with pytest.raises(StreamingQueryException, match="not confirmed"):
        q.awaitTermination(120)
    assert not (tmp_path / f"cp-{node.stomp_port}" / "commits" / "0").exists()


def test_read_back_keeps_the_types(spark: SparkSession, node: NodeProcess):
    register(spark)
    c = StompClient("127.0.0.1", node.stomp_port)
    c.send_many(
        [({"destination": "/queue/readback", "n": str(i), "ok": "true", "ws-types": "n=long,ok=bool",
           "content-type": "text/plain"}, f"r{i}".encode()) for i in range(5)]
    )  # fmt: skip
    c.close()
    df = (
        spark.readStream.format("waystation")
        .option("port", str(node.stomp_port))
        .option("queue", "readback")
        .load()
    )
    q = df.writeStream.format("memory").queryName("readback").start()
    try:
        deadline = time.monotonic() + 60
        while spark.table("readback").count() < 5 and time.monotonic() < deadline:
            time.sleep(0.2)
        got = spark.table("readback").orderBy("body").collect()
    finally:
        q.stop()
    assert [bytes(r["body"]) for r in got] == [f"r{i}".encode() for i in range(5)]
    assert all(r["types"] == {"n": "long", "ok": "bool"} for r in got)
    assert [r["properties"]["n"] for r in got] == ["0", "1", "2", "3", "4"]
    assert {r["content_type"] for r in got} == {"text/plain"}
    assert {r["destination"] for r in got} == {"/queue/readback"}
