"""``/health``, ``/ready`` and ``/metrics`` of a real node under a known workload."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from opskit import ADMIN, secured_node
from prometheus_client.parser import text_string_to_metric_families
from stompkit import connect, unique


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = secured_node(tmp_path_factory.mktemp("ops-metrics")).start()
    yield n
    n.stop()


def fetch(url: str, auth: aiohttp.BasicAuth | None = None) -> tuple[int, str, str]:
    async def go() -> tuple[int, str, str]:
        async with aiohttp.ClientSession() as s, s.get(url, auth=auth) as r:
            return r.status, r.headers.get("Content-Type", ""), await r.text()

    return asyncio.run(go())


def scrape(node) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape (as admin: security is on), by name and sorted labels."""
    status, ctype, text = fetch(node.http_url + "/metrics", ADMIN)
    assert status == 200 and ctype.startswith("text/plain"), (status, ctype)
    out = {}
    for fam in text_string_to_metric_families(text):
        assert fam.name.startswith("waystation_"), fam.name
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def queue_sample(samples, name: str, queue: str) -> float:
    hits = [v for (n, labels), v in samples.items() if n == name and ("queue", queue) in labels]
    assert len(hits) == 1, (name, queue, hits)
    return hits[0]


def test_health_and_ready_answer_200_while_serving(node):
    status, _, text = fetch(node.http_url + "/health")
    assert status == 200 and '"ok"' in text
    status, _, text = fetch(node.http_url + "/ready")
    assert status == 200 and '"ready"' in text


def test_a_known_workload_shows_in_the_scrape(node):
    q = unique("m")
    conn, got = connect(node.stomp_port, login="app", passcode="secret")
    try:
        for i in range(5):  # one at a time: sends read together share one journal batch
            conn.send(f"/queue/{q}", "x" * 10, receipt=f"r{i}", headers={"persistent": "true"})
            got.wait_receipt(f"r{i}")
        conn.subscribe(
            f"/queue/{q}", id="s1", ack="client-individual", headers={"prefetch-count": "2"}
        )
        msgs = got.wait_messages(2)
        for m in msgs[:2]:
            conn.ack(m.headers["ack"])
        conn.unsubscribe(id="s1", receipt="u1")
        got.wait_receipt("u1")
        s = scrape(node)
        assert queue_sample(s, "waystation_queue_enqueued_total", q) == 5
        assert queue_sample(s, "waystation_queue_acked_total", q) == 2
        # two delivered and acked, the rest given back when the subscription went
        assert queue_sample(s, "waystation_queue_messages", q) == 3
        assert queue_sample(s, "waystation_queue_consumers", q) == 0
        assert queue_sample(s, "waystation_queue_in_flight", q) == 0
        assert s[("waystation_connections", (("protocol", "stomp"),))] >= 1
        assert s[("waystation_address_memory_bytes", (("address", q),))] > 0
        assert s[("waystation_journal_batches_total", ())] >= 5  # one per durable send at least
        assert s[("waystation_journal_fsyncs_total", ())] >= 1
        assert ("waystation_event_loop_lag_seconds", ()) in s
    finally:
        conn.disconnect()


def test_connections_by_protocol_follow_connects_and_disconnects(node):
    before = scrape(node).get(("waystation_connections", (("protocol", "stomp"),)), 0)
    conns = [connect(node.stomp_port, login="app", passcode="secret")[0] for _ in range(3)]
    assert scrape(node)[("waystation_connections", (("protocol", "stomp"),))] == before + 3
    for c in conns:
        c.disconnect()
    for _ in range(50):
        if scrape(node)[("waystation_connections", (("protocol", "stomp"),))] == before:
            break
        asyncio.run(asyncio.sleep(0.05))
    assert scrape(node)[("waystation_connections", (("protocol", "stomp"),))] == before


def test_the_docker_healthcheck_command_passes_against_a_serving_node(node):
    import json
    import re
    import subprocess
    import sys

    from nodekit import ROOT

    text = (ROOT / "docker" / "Dockerfile").read_text()
    m = re.search(r"HEALTHCHECK .*?CMD (\[.*?\])\n", text, re.S)
    assert m, "no HEALTHCHECK in docker/Dockerfile"
    argv = json.loads(m.group(1))
    assert argv[0] == "python"
    code = argv[-1].replace(":8161/", f":{node.http_port}/")
    assert subprocess.run([sys.executable, "-c", code], timeout=10).returncode == 0
    bad = code.replace("/health", "/no-such-path")
    assert (
        subprocess.run([sys.executable, "-c", bad], capture_output=True, timeout=10).returncode != 0
    )
