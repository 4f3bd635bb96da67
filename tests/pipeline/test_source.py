"""``format("waystation")``: a DataFrame written to a real node's queue through its REST API
comes back from a batch read, body and headers, each message once."""

from __future__ import annotations

import pytest
from nodekit import NodeProcess
from pyspark.sql import SparkSession

from waystation.pipeline.source import register

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(tmp_path_factory.mktemp("spark-source"), http=True).start()
    yield n
    n.stop()


def test_write_then_read_a_queue(spark: SparkSession, node: NodeProcess):
    register(spark)
    rows = [(f"order {i}".encode(), "text/plain", {"x-order": str(i)}) for i in range(30)]
    df = spark.createDataFrame(rows, "body BINARY, content_type STRING, headers MAP<STRING,STRING>")
    opts = {"url": node.http_url, "queue": "spark-orders"}
    df.repartition(3).write.format("waystation").options(**opts).mode("append").save()

    got = spark.read.format("waystation").options(**opts, wait="0.5").load().collect()
    assert sorted(bytes(r["body"]) for r in got) == sorted(r[0] for r in rows)
    assert {r["content_type"].split(";")[0] for r in got} == {"text/plain"}
    assert sorted(int(r["headers"]["x-order"]) for r in got) == list(range(30))
    # consumed: a second read finds the queue empty
    assert spark.read.format("waystation").options(**opts, wait="0.3").load().count() == 0


def test_max_limits_a_read(spark: SparkSession, node: NodeProcess):
    register(spark)
    opts = {"url": node.http_url, "queue": "spark-max"}
    df = spark.createDataFrame([(b"m",)] * 5, "body BINARY")
    df.write.format("waystation").options(**opts).mode("append").save()
    assert spark.read.format("waystation").options(**opts, max="2").load().count() == 2
    assert spark.read.format("waystation").options(**opts, wait="0.3").load().count() == 3


def test_a_retried_task_resends_nothing_twice(spark: SparkSession, node: NodeProcess):
    """A retry runs ``write`` again on the same writer (pickled once on the driver) for the
    same partition: the same duplicate ids, so the node keeps one message per row; a new
    write of the same rows is new messages."""
    from pyspark.sql import Row

    from waystation.pipeline.source import WaystationDataSource

    register(spark)
    opts = {"url": node.http_url, "queue": "spark-retry"}
    source = WaystationDataSource(opts)
    writer = source.writer(spark.createDataFrame([], "body STRING").schema, False)
    rows = [Row(body=f"r{i}") for i in range(6)]
    writer.write(iter(rows[:3]))  # the first attempt dies after three rows
    writer.write(iter(rows))  # the retry sends all of them again
    got = spark.read.format("waystation").options(**opts, wait="0.5").load().collect()
    assert sorted(bytes(r["body"]) for r in got) == [f"r{i}".encode() for i in range(6)]

    source.writer(spark.createDataFrame([], "body STRING").schema, False).write(iter(rows[:2]))
    again = spark.read.format("waystation").options(**opts, wait="0.5").load().collect()
    assert sorted(bytes(r["body"]) for r in again) == [b"r0", b"r1"]
