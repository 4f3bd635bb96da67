"""The streaming source's offset protocol, driven call by call as Spark drives it (no JVM):
a batch is acknowledged only by ``commit``; after a crash a planned batch replays with the
same messages, and a committed-but-unacknowledged batch is never emitted again."""

from __future__ import annotations

import socket

import pytest
from nodekit import NodeProcess

from waystation.pipeline.stomp_client import StompClient
from waystation.pipeline.stream import QueueStreamReader

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def node(tmp_path):
    n = NodeProcess(tmp_path / "node").start()
    yield n
    n.stop()


def fill(port: int, queue: str, count: int) -> None:
    c = StompClient("127.0.0.1", port)
    dest = f"/queue/{queue}"
    c.send_many(
        [({"destination": dest, "persistent": "true"}, f"m{i}".encode()) for i in range(count)]
    )
    c.close()


def left_in(port: int, queue: str, expect: int = 0) -> list[bytes]:
    """What the queue holds: waits up to 10 s for ``expect`` messages (a closed
    connection's are given back asynchronously), then 0.5 s for more."""
    c = StompClient("127.0.0.1", port)
    c.subscribe(f"/queue/{queue}", "check", 0)
    bodies: list[bytes] = []
    while (f := c.receive(10 if len(bodies) < expect else 0.5)) is not None:
        bodies.append(f.body)
    c.close()
    return bodies


def reader(node: NodeProcess, queue: str) -> QueueStreamReader:
    return QueueStreamReader({"port": str(node.stomp_port), "queue": queue, "maxBatch": "4"})


def crash(r: QueueStreamReader) -> None:
    """The driver dies: the socket closes without a DISCONNECT or any acknowledgement."""
    assert r.client is not None
    r.client.sock.shutdown(socket.SHUT_RDWR)  # what the kernel does for a killed process
    r.client.sock.close()


def bodies(r: QueueStreamReader, start: dict, end: dict) -> list[bytes]:
    return [row[2] for p in r.partitions(start, end) for row in r.read(p)]


def test_a_planned_batch_replays_with_the_same_messages(node: NodeProcess):
    fill(node.stomp_port, "replay", 10)
    r = reader(node, "replay")
    start = r.initialOffset()
    end1 = r.latestOffset(start, None)
    assert bodies(r, start, end1) == [b"m0", b"m1", b"m2", b"m3"]
    end2 = r.latestOffset(end1, None)
    r.commit(end1)  # Spark: offset log has batch 2, so batch 1 is acknowledged
    first_try = bodies(r, end1, end2)
    crash(r)  # batch 2 ran but its sink never committed

    r2 = reader(node, "replay")
    assert bodies(r2, end1, end2) == first_try == [b"m4", b"m5", b"m6", b"m7"]
    end3 = r2.latestOffset(end2, None)
    r2.commit(end2)
    assert bodies(r2, end2, end3) == [b"m8", b"m9"]
    assert r2.latestOffset(end3, None) == end3  # nothing new: the same offset
    r2.commit(end3)
    r2.stop()
    assert left_in(node.stomp_port, "replay") == []


def test_a_committed_batch_is_not_emitted_again(node: NodeProcess):
    fill(node.stomp_port, "skip", 6)
    r = reader(node, "skip")
    start = r.initialOffset()
    end1 = r.latestOffset(start, None)
    assert bodies(r, start, end1) == [b"m0", b"m1", b"m2", b"m3"]
    crash(r)  # the sink committed batch 1; Spark never called commit(end1)

    r2 = reader(node, "skip")
    end2 = r2.latestOffset(end1, None)  # the restart continues from batch 1's offset
    assert bodies(r2, end1, end2) == [b"m4", b"m5"]
    assert not set(end2["ids"]) & set(end1["ids"])
    r2.stop()  # batch 2 not committed: it stays; batch 1's redelivery was acknowledged
    assert left_in(node.stomp_port, "skip", 2) == [b"m4", b"m5"]


def test_nothing_is_acknowledged_before_spark_committed_the_batch(node: NodeProcess):
    fill(node.stomp_port, "hold", 3)
    r = reader(node, "hold")
    end = r.latestOffset(r.initialOffset(), None)
    assert len(bodies(r, r.initialOffset(), end)) == 3
    r.stop()
    assert left_in(node.stomp_port, "hold", 3) == [b"m0", b"m1", b"m2"]


def test_asking_from_a_batch_end_acknowledges_it(node: NodeProcess):
    """Spark asks for the offset after a batch only once the batch is in its commit log;
    an idle query must not hold that batch until its late ``commit`` call."""
    fill(node.stomp_port, "idle", 3)
    r = reader(node, "idle")
    end = r.latestOffset(r.initialOffset(), None)
    bodies(r, r.initialOffset(), end)
    assert r.latestOffset(end, None) == end  # idle: nothing new
    crash(r)
    assert left_in(node.stomp_port, "idle") == []
