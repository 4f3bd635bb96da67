"""Every message's path across two sites is rebuilt from the nodes' event logs by trace id
(DESIGN §8): accepted at site-a, forwarded over the bridge, accepted at site-b under the same
trace id, delivered and acknowledged there — with the link cut again and again on the way."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from sitekit import Repeater, check_once_in_order, collect, send_all, two_sites

pytestmark = pytest.mark.timeout(180)

EVENT_LOG = '\n[node.event_log]\nenabled = true\nformat = "jsonl"\n'


def events(node_dir: Path) -> list[dict[str, object]]:
    files = sorted((node_dir / "data" / "events").glob("events-*.jsonl"))
    assert files, f"no event log under {node_dir}"
    return [json.loads(line) for f in files for line in f.read_text().splitlines()]


def test_each_message_path_is_rebuilt_by_trace_id_through_link_cuts(tmp_path):
    sites = two_sites(
        tmp_path, a_extra=EVENT_LOG, b_extra=EVENT_LOG, bridge={"confirmation_window": 50}
    )
    sites.proxy.set_bandwidth(50_000)  # slow enough that several cuts land mid-transfer
    cutter = Repeater(0.3, sites.proxy.cut)
    cutter.start()
    try:
        sent = [f"m{i}" for i in range(600)]
        confirmed = send_all(sites.a.stomp_port, "/queue/site-b::orders", sent, batch=100)
        assert confirmed == sent
        received = collect(sites.b.stomp_port, "orders", confirmed, timeout=90)
        cuts = cutter.stop()
        check_once_in_order(sent, confirmed, received)
    finally:
        cutter.stop()
        sites.stop()
    assert cuts >= 3 and sites.proxy.stats()["connections_cut"] >= 3

    path: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for node, recs in (("site-a", events(sites.a.workdir)), ("site-b", events(sites.b.workdir))):
        for r in recs:
            if r["trace_id"]:
                path[str(r["trace_id"])].append((node, str(r["event"])))
    traces = [t for t, hops in path.items() if ("site-a", "accepted") in hops]
    assert len(traces) == len(sent)  # one trace per message sent at site-a
    assert all(t.startswith("site-a/") for t in traces)
    for t in traces:
        hops = path[t]
        for hop in (
            ("site-a", "accepted"),
            ("site-a", "forwarded"),
            ("site-b", "accepted"),
            ("site-b", "delivered"),
            ("site-b", "acked"),
        ):
            assert hop in hops, (t, hops)
        # a resend after a cut is dropped at site-b: delivered exactly once
        assert hops.count(("site-b", "delivered")) == 1, (t, hops)
        assert hops.count(("site-a", "forwarded")) == 1, (t, hops)
