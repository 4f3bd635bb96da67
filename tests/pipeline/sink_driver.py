"""A Spark driver for the sink's kill-and-restart test: a checkpointed streaming query from
a Parquet folder into a node's queue (``writeStream.format("waystation")``), in small
confirmed chunks and slowed down (2 ms a row) so that it is killed mid-batch; it exits
once the batch committed.

    python sink_driver.py PORT QUEUE IN CHECKPOINT
"""

from __future__ import annotations

import sys
import time

from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from waystation.pipeline.session import spark_session
from waystation.pipeline.source import register

SCHEMA = "body STRING, properties STRUCT<n: INT>"


def main() -> None:
    port, queue, src, checkpoint = sys.argv[1:5]
    spark = spark_session("local[1]", shuffle_partitions=1, driver_memory="512m")
    register(spark)

    def pause(body: str) -> str:
        time.sleep(0.002)
        return body

    slow = F.udf(pause, StringType())
    q = (
        spark.readStream.schema(SCHEMA)
        .parquet(src)
        .select(slow("body").alias("body"), "properties")
        .writeStream.format("waystation")
        .option("port", port)
        .option("queue", queue)
        .option("chunk", "10")  # a receipt every 10 messages: the batch takes seconds
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    print("started", flush=True)
    q.awaitTermination()
    if q.exception() is not None:
        raise SystemExit(f"query failed: {q.exception()}")


if __name__ == "__main__":
    main()
