"""``readStream.format("waystation")``: a checkpointed query into a file sink, its driver
killed (SIGKILL, the whole process group: the JVM and the Python workers) in the middle of
the flow and restarted from the checkpoint, writes every message of the queue exactly once;
messages are acknowledged only when Spark commits, so the node still holds the ones the
killed driver had taken but not committed."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import driverkit
import pytest
from driverkit import kill_group
from nodekit import NodeProcess
from pyspark.sql import SparkSession

from waystation.pipeline.stomp_client import StompClient

pytestmark = pytest.mark.timeout(300)
DRIVER = Path(__file__).with_name("stream_driver.py")


def send(port: int, queue: str, numbers: range) -> None:
    c = StompClient("127.0.0.1", port)
    try:
        c.send_many(
            [
                (
                    {"destination": f"/queue/{queue}", "persistent": "true", "n": str(i),
                     "ws-types": "n=int"},
                    f"m{i}".encode(),
                )
                for i in numbers
            ]
        )  # fmt: skip
    finally:
        c.close()


def sink_rows(out: Path) -> list[dict[str, object]]:
    """The rows of the batches the file sink committed (the files its log names)."""
    files: set[str] = set()
    log = out / "_spark_metadata"
    for f in log.glob("*") if log.is_dir() else []:
        if f.name.isdigit() or f.name.endswith(".compact"):
            lines = f.read_text().splitlines()[1:]  # "v1", then one JSON entry per file
            files |= {json.loads(line)["path"] for line in lines if line.strip()}
    rows = []
    for path in files:
        text = Path(path.removeprefix("file://")).read_text()
        rows += [json.loads(line) for line in text.splitlines() if line.strip()]
    return rows


class Feeder(threading.Thread):
    """Sends numbered messages one by one from ``first`` until stopped, so the query is
    mid-flow when its driver is killed and messages keep coming while it is down."""

    def __init__(self, port: int, first: int) -> None:
        super().__init__(daemon=True)
        self.port, self.sent = port, first
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            send(self.port, "orders", range(self.sent, self.sent + 1))
            self.sent += 1
            time.sleep(0.01)


def start_driver(port: int, out: Path, checkpoint: Path, log: Path) -> subprocess.Popen[bytes]:
    return driverkit.start_driver(
        DRIVER, [str(port), "orders", str(out), str(checkpoint), "20"], log
    )


def wait_rows(out: Path, at_least: int, p: subprocess.Popen[bytes], log: Path, limit: float) -> int:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        n = len(sink_rows(out))
        if n >= at_least:
            return n
        if p.poll() is not None:
            pytest.fail(f"driver exited {p.returncode}:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
    pytest.fail(
        f"sink has {len(sink_rows(out))} rows, wanted {at_least}:\n{log.read_text()[-3000:]}"
    )


def test_killed_driver_restarts_from_checkpoint_exactly_once(spark: SparkSession, tmp_path: Path):
    node = NodeProcess(tmp_path / "node").start()
    out, checkpoint, log = tmp_path / "out", tmp_path / "checkpoint", tmp_path / "driver.log"
    driver = None
    try:
        send(node.stomp_port, "orders", range(100))
        driver = start_driver(node.stomp_port, out, checkpoint, log)
        feeder = Feeder(node.stomp_port, 100)
        wait_rows(out, 20, driver, log, 150)
        feeder.start()  # batches of at most 20 while messages keep coming
        wait_rows(out, 150, driver, log, 150)
        kill_group(driver)
        killed_at = len(sink_rows(out))

        driver = start_driver(node.stomp_port, out, checkpoint, log)
        wait_rows(out, killed_at + 50, driver, log, 150)
        feeder.stop.set()
        feeder.join()
        total = feeder.sent
        assert total > killed_at + 50
        wait_rows(out, total, driver, log, 150)
        time.sleep(1)  # a duplicate would come in the next batches
        kill_group(driver)
    finally:
        if driver is not None:
            kill_group(driver)
        node.stop()

    # the committed output (the file sink's log: a killed batch's files are not in it)
    got = spark.read.json(str(out)).collect()
    numbers = sorted(int(r["body"][1:]) for r in got)
    assert numbers == list(range(total)), f"killed after {killed_at} rows"
    assert len({r["message_id"] for r in got}) == total
    assert {r["properties"]["n"] for r in got} == {str(i) for i in range(total)}
