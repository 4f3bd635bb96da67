"""The test kit itself: a Drain outlives the node's connection TTL.

A Drain only listens, and a node closes a connection that sends nothing for
``connection_ttl`` (60s by default) even while it delivers to it.  The squid acceptance run
took over 90s under load; its drains were closed mid-run and every later message was
reported lost although the hub had it."""

from __future__ import annotations

import time
from pathlib import Path

from nodekit import NodeProcess
from sitekit import Drain, send_all


def test_a_drain_outlives_the_connection_ttl(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "n", name="n", stomp='connection_ttl = "1s"').start()
    try:
        d = Drain(node.stomp_port, "orders")
        try:
            time.sleep(3.0)  # without heart-beats: closed after 1-1.5s
            assert send_all(node.stomp_port, "orders", ["late"]) == ["late"]
            assert d.wait_for(1, 10) == ["late"]
            assert "connection TTL expired" not in node.log()
        finally:
            d.close()
    finally:
        node.stop()
