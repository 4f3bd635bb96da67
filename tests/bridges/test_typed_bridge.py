"""Across a bridge between two real nodes: a typed property keeps its type, a boolean divert
filter on the receiving node matches it, and the receiving node keeps the sender's trace id
(its ``accepted`` event has the trace id of the sender's ``forwarded``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from sitekit import Drain, send_all, two_sites

from waystation.gateway.stomp.mapping import parse_types

pytestmark = pytest.mark.timeout(120)

EVENTS = '\n[node.event_log]\nenabled = true\nformat = "jsonl"\n'
B_EXTRA = (
    EVENTS
    + """
[[queues]]
name = "orders"
[[queues]]
name = "urgent"

[[diverts]]
name = "urgent-copy"
address = "orders"
target = "urgent"
filter = "urgent = TRUE"
exclusive = false
"""
)


def events(node_dir: Path) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for f in sorted((node_dir / "data" / "events").glob("events-*.jsonl")):
        out += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return out


def test_types_fields_and_trace_id_cross_the_bridge(tmp_path: Path) -> None:
    sites = two_sites(tmp_path, a_extra=EVENTS, b_extra=B_EXTRA)
    try:
        typed = {"urgent": "true", "n": "5", "ws-types": "urgent=bool,n=int"}
        assert send_all(sites.a.stomp_port, "site-b::orders", ["hot"], headers=typed) == ["hot"]
        plain = {"urgent": "true", "correlation-id": "c-7", "content-type": "text/plain"}
        assert send_all(sites.a.stomp_port, "site-b::orders", ["cold"], headers=plain) == ["cold"]
        orders = Drain(sites.b.stomp_port, "orders")
        urgent = Drain(sites.b.stomp_port, "urgent")
        try:
            assert orders.wait_all(["hot", "cold"], 20) == ["hot", "cold"]
            hot, cold = orders.messages
            urgent.wait_for(1, 10)
            time.sleep(0.3)
            # only the boolean matched the divert; the string "true" did not
            assert urgent.bodies() == ["hot"]
            copy = urgent.messages[0].headers
        finally:
            orders.close()
            urgent.close()
        h = hot.headers
        assert h["urgent"] == "true" and h["n"] == "5"
        assert dict(parse_types(h["ws-types"])) == {"urgent": "bool", "n": "int"}
        assert "ws-types" not in cold.headers
        assert cold.headers["correlation-id"] == "c-7"
        assert cold.headers["content-type"] == "text/plain"
        trace = h["ws-trace-id"]
        assert trace.startswith("site-a/")
        assert copy["ws-trace-id"] == trace  # the divert's copy at site-b too
    finally:
        sites.stop()
    a_events = events(tmp_path / "site-a")
    b_events = events(tmp_path / "site-b")
    fwd = [r for r in a_events if r["event"] == "forwarded" and r["trace_id"] == trace]
    assert len(fwd) == 1 and fwd[0]["peer"] == "site-b"
    accepted = [r for r in b_events if r["event"] == "accepted" and r["trace_id"] == trace]
    assert len(accepted) == 1 and accepted[0]["node"] == "site-b"
    assert any(r["event"] == "diverted" and r["trace_id"] == trace for r in b_events)
    assert not any(r["trace_id"] and r["trace_id"].startswith("site-b/") for r in accepted)
