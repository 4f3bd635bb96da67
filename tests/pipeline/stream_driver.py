"""A Spark driver for the kill-and-restart test: a checkpointed streaming query from a node's
queue (``format("waystation")``) into a JSON file sink, run until it is killed.

    python stream_driver.py PORT QUEUE OUT CHECKPOINT MAX_BATCH
"""

from __future__ import annotations

import sys
import time

from waystation.pipeline.session import spark_session
from waystation.pipeline.source import register


def main() -> None:
    port, queue, out, checkpoint, max_batch = sys.argv[1:6]
    spark = spark_session("local[1]", shuffle_partitions=1, driver_memory="512m")
    register(spark)
    src = (
        spark.readStream.format("waystation")
        .option("port", port)
        .option("queue", queue)
        .option("maxBatch", max_batch)
        .load()
    )
    q = (
        src.selectExpr("message_id", "CAST(body AS STRING) AS body", "properties")
        .writeStream.format("json")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="0 seconds")
        .start()
    )
    print("started", flush=True)
    while q.isActive:
        time.sleep(0.2)
    raise SystemExit(f"query ended: {q.exception()}")


if __name__ == "__main__":
    main()
