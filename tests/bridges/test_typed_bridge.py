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
        hot_id, copy_id = int(h["message-id"]), int(copy["message-id"])
    finally:
        sites.stop()
    a_events = events(tmp_path / "site-a")
    b_events = events(tmp_path / "site-b")
    fwd = [r for r in a_events if r["event"] == "forwarded"]
    assert len(fwd) == 2 and {r["peer"] for r in fwd} == {"site-b"}
    traces = [r["trace_id"] for r in fwd]
    assert all(isinstance(t, str) and t.startswith("site-a/") for t in traces)
    # site-b accepted each with the trace id site-a gave it, and made none of its own
    accepted = [r for r in b_events if r["event"] == "accepted"]
    assert sorted(r["trace_id"] for r in accepted) == sorted(traces)  # type: ignore[type-var]
    (hot_accepted,) = [r for r in accepted if r["message_id"] == hot_id]
    trace = hot_accepted["trace_id"]
    # the divert's copy at site-b keeps it too
    (diverted,) = [r for r in b_events if r["event"] == "diverted"]
    assert diverted["trace_id"] == trace and diverted["message_id"] == copy_id
