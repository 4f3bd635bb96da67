"""``writeStream.format("waystation")`` is exactly once: its driver killed (SIGKILL, the whole
process group) in the middle of a micro-batch and restarted from the checkpoint re-runs the
batch and sends every row again, and the node's duplicate detection keeps one message per
row (each message carries ``spark/<query id>/<batch>/<partition>/<row>`` as its duplicate
id)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import driverkit
import pytest
from driverkit import kill_group
from nodekit import NodeProcess
from pyspark.sql import SparkSession

from waystation.pipeline.stomp_client import StompClient

pytestmark = pytest.mark.timeout(300)
DRIVER = Path(__file__).with_name("sink_driver.py")
ROWS = 5000  # 10 s at the driver's 2 ms a row; within the duplicate cache (20,000)


def start_driver(port: int, src: Path, checkpoint: Path, log: Path) -> subprocess.Popen[bytes]:
    return driverkit.start_driver(DRIVER, [str(port), "copy", str(src), str(checkpoint)], log)


class Watcher:
    """Takes (and acknowledges) every message of the target queue as it arrives."""

    def __init__(self, port: int) -> None:
        self.client = StompClient("127.0.0.1", port)
        self.client.subscribe("/queue/copy", "watch", 0)
        self.bodies: list[bytes] = []

    def take(self, wait: float, until: int = ROWS) -> None:
        """Take what arrives (waiting up to ``wait`` for the first), acknowledging each batch
        that has arrived in one go, until nothing more is there or ``until`` are in.  (An ACK
        per message, each waiting for its receipt, fell behind the driver's pace on a
        loaded machine, so the kill came after the batch had committed.)"""
        while len(self.bodies) < until:
            acks: list[str] = []
            while (f := self.client.receive(wait)) is not None:
                self.bodies.append(f.body)
                acks.append(f.headers["ack"])
                wait = 0
            if not acks:
                return
            self.client.ack(acks)  # the next messages come before its receipt
            wait = 0


def test_killed_writer_restarts_from_checkpoint_exactly_once(spark: SparkSession, tmp_path: Path):
    src, checkpoint, log = tmp_path / "in", tmp_path / "checkpoint", tmp_path / "driver.log"
    rows = [(f"m{i}", (i,)) for i in range(ROWS)]
    spark.createDataFrame(rows, "body STRING, properties STRUCT<n: INT>").coalesce(1).write.parquet(
        str(src)
    )
    node = NodeProcess(tmp_path / "node").start()
    driver = None
    try:
        watch = Watcher(node.stomp_port)
        driver = start_driver(node.stomp_port, src, checkpoint, log)
        deadline = time.monotonic() + 200
        while len(watch.bodies) < 200:  # the batch is on its way: kill it
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            assert driver.poll() is None, log.read_text()[-3000:]
            watch.take(0.05, until=200)
        kill_group(driver)
        watch.take(0.5)
        before = len(watch.bodies)
        assert not (checkpoint / "commits" / "0").exists(), "the batch finished before the kill"
        assert (checkpoint / "offsets" / "0").exists()
        assert 0 < before <= ROWS  # usually part of it; all of it still needs the commit

        driver = start_driver(node.stomp_port, src, checkpoint, log)
        assert driver.wait(200) == 0, log.read_text()[-3000:]
        assert (checkpoint / "commits" / "0").exists()
        watch.take(1.0)  # a duplicate would be here by now
        watch.client.close()
    finally:
        if driver is not None:
            kill_group(driver)
        node.stop()

    # the re-run sent all ROWS rows again; without the duplicate ids the queue would have
    # had ``before`` of them twice
    assert sorted(watch.bodies) == sorted(f"m{i}".encode() for i in range(ROWS))
