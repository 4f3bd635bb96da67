"""``/metrics`` behind a login and with a bounded number of series, and the admin API's long
lists in pages, on a real node holding more names than the caps."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from nodekit import NodeProcess
from opskit import ADMIN, APP, OPS, USERS
from prometheus_client.parser import text_string_to_metric_families
from stompkit import connect, unique

API = "/admin/api/v1"
CAP = 5
PROM = aiohttp.BasicAuth("prom", "prompw")
MONITORING = """
[[users]]
name = "prom"
password = "prompw"
roles = ["monitoring"]

[address_settings."dl.#"]
dead_letter_address = "DLQ"
max_delivery_attempts = 1
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    http = f'metrics = {{ max_queue_series = {CAP}, max_address_series = {CAP}, roles = ["monitoring"] }}'
    n = NodeProcess(tmp_path_factory.mktemp("metrics-caps"), USERS + MONITORING, http=http).start()
    yield n
    n.stop()


def get(node: NodeProcess, path: str, auth: aiohttp.BasicAuth | None) -> tuple[int, str, Any]:
    async def go() -> tuple[int, str, Any]:
        async with aiohttp.ClientSession() as s, s.get(node.http_url + path, auth=auth) as r:
            return r.status, await r.text(), r.headers

    return asyncio.run(go())


def fill(node: NodeProcess, depths: dict[str, int]) -> None:
    conn, got = connect(node.stomp_port, login="app", passcode="secret")
    try:
        n = 0
        for q, depth in depths.items():
            for _ in range(depth):
                conn.send(f"/queue/{q}", "x", receipt=f"r{n}")
                n += 1
        got.wait_receipt(f"r{n - 1}")
    finally:
        conn.disconnect()


def samples(text: str, name: str, label: str) -> dict[str, float]:
    return {
        s.labels[label]: s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == name
    }


def test_metrics_need_a_login_with_security_on(node):
    status, text, headers = get(node, "/metrics", None)
    assert status == 401 and "WWW-Authenticate" not in headers, text
    assert get(node, "/metrics", aiohttp.BasicAuth("prom", "wrong"))[0] == 401
    assert get(node, "/metrics", APP)[0] == 403  # a user, but no manage on '#' nor the role
    assert get(node, "/metrics", OPS)[0] == 403  # manage on ops.# only
    for who in (PROM, ADMIN):
        status, text, _ = get(node, "/metrics", who)
        assert status == 200 and "waystation_queues " in text


def test_series_are_capped_and_the_rest_summed_in_other(node):
    prefix = unique("cap")
    depths = {f"{prefix}.{i:02d}": i for i in range(1, 21)}  # 20 queues, depths 1..20
    fill(node, depths)
    status, text, _ = get(node, "/metrics", PROM)
    assert status == 200
    depth = samples(text, "waystation_queue_messages", "queue")
    assert len(depth) == CAP + 1, depth
    deepest = sorted(depths, key=depths.get, reverse=True)[:CAP]
    assert set(depth) == {*deepest, "_other"}
    assert all(depth[q] == depths[q] for q in deepest)
    total = next(
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "waystation_queues"
    )
    everything = sum(get_depths(node).values())
    assert depth["_other"] == everything - sum(depths[q] for q in deepest)
    assert total >= 20
    enq = samples(text, "waystation_queue_enqueued_total", "queue")
    assert set(enq) == set(depth)
    memory = samples(text, "waystation_address_memory_bytes", "address")
    assert len(memory) == CAP + 1 and "_other" in memory
    # every series of a family is there once: the same label set each (Prometheus refuses
    # a scrape with duplicates)
    for fam in text_string_to_metric_families(text):
        keys = [tuple(sorted(s.labels.items())) + (s.name,) for s in fam.samples]
        assert len(keys) == len(set(keys)), fam.name


def get_depths(node: NodeProcess) -> dict[str, int]:
    out: dict[str, int] = {}
    after = None
    while True:
        path = API + "/queues?limit=7" + (f"&after={after}" if after else "")
        status, text, _ = get(node, path, ADMIN)
        assert status == 200, text
        body = json.loads(text)
        out.update({q["name"]: q["depth"] for q in body["queues"] if not q["temporary"]})
        after = body["next"]
        if after is None:
            return out


def test_queue_and_address_lists_come_in_pages(node):
    prefix = unique("ops.page")
    names = [f"{prefix}.{i:02d}" for i in range(12)]
    fill(node, dict.fromkeys(names, 1))
    status, text, _ = get(node, API + "/queues?limit=5", ADMIN)
    body = json.loads(text)
    assert status == 200 and len(body["queues"]) == 5 and body["limit"] == 5
    page = [q["name"] for q in body["queues"]]
    assert page == sorted(page) and body["next"] == page[-1]
    assert body["total"] >= 12
    # every page, by the cursor: each name once, in order
    seen = list(get_depths(node))
    assert seen == sorted(seen) and set(names) <= set(seen)
    # a scoped manager pages through what it may manage only
    status, text, _ = get(node, API + "/queues?limit=1000", OPS)
    body = json.loads(text)
    assert {q["name"] for q in body["queues"]} >= set(names)
    assert all(q["address"].startswith("ops.") for q in body["queues"])
    assert body["total"] == len(body["queues"]) and body["next"] is None
    status, text, _ = get(node, API + f"/addresses?limit=3&after={prefix}.03", ADMIN)
    body = json.loads(text)
    assert [a["name"] for a in body["addresses"]] == names[4:7]
    assert body["addresses"][0]["queues"] == [names[4]]
    assert body["addresses"][0]["memory_bytes"] > 0
    assert get(node, API + "/queues?limit=0", ADMIN)[0] == 400
    assert get(node, API + "/queues?limit=x", ADMIN)[0] == 400
    status, text, _ = get(node, API + "/queues?limit=999999", ADMIN)
    assert json.loads(text)["limit"] == 1000


def test_login_can_be_turned_off(tmp_path):
    n = NodeProcess(tmp_path / "n", USERS, http="metrics = { login = false }").start()
    try:
        status, text, _ = get(n, "/metrics", None)
        assert status == 200 and "waystation_queues" in text
    finally:
        n.stop()


def test_hostile_names_are_escaped_in_the_scrape(node):
    q = unique('ops.q"uote\\back')
    fill(node, {q: 60})  # deep enough to keep a series of its own
    status, text, _ = get(node, "/metrics", PROM)
    assert status == 200
    depth = samples(text, "waystation_queue_messages", "queue")
    assert depth[q] == 60


def test_dead_letters_of_queues_without_a_series_are_in_other(node):
    fill(node, {unique("ops.deep"): 80})  # the five deepest are others, so dl.* is summed
    q = unique("dl.pay")
    fill(node, {q: 1})
    conn, got = connect(node.stomp_port, login="app", passcode="secret")
    try:
        conn.subscribe(f"/queue/{q}", id="s", ack="client-individual")
        m = got.wait_messages(1)[0]
        conn.nack(m.headers["ack"], receipt="n")
        got.wait_receipt("n")
    finally:
        conn.disconnect()
    status, text, _ = get(node, "/metrics", PROM)
    dead = [
        s
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "waystation_queue_dead_lettered_total"
    ]
    assert [(s.labels["queue"], s.value) for s in dead] == [("_other", 1)], dead
    assert dead[0].labels["reason"]


def test_a_queue_named_other_does_not_break_the_scrape(node):
    fill(node, {"_other": 90})  # deepest, and its address holds the most bytes
    status, text, _ = get(node, "/metrics", PROM)
    assert status == 200
    for fam in text_string_to_metric_families(text):
        keys = [(s.name, tuple(sorted(s.labels.items()))) for s in fam.samples]
        assert len(keys) == len(set(keys)), fam.name
    depth = [
        s
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "waystation_queue_messages" and s.labels["queue"] == "_other"
    ]
    assert {s.labels["routing"] for s in depth} == {"anycast", ""}
