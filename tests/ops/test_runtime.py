"""Run-time addresses, queues, diverts and bridge pause/resume through the admin API and
``waystation admin``: checked as the config file is, kept over a reload, and (all but
durable queues) gone after a restart."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from typing import Any

import aiohttp
import pytest
from nodekit import ROOT, free_port
from opskit import ADMIN, APP, OPS, secured_node
from sitekit import bridge_toml
from stompkit import connect, unique

API = "/admin/api/v1"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = secured_node(
        tmp_path_factory.mktemp("ops-runtime"),
        bridge_toml("to-b", "site-b", [free_port()]),
    ).start()
    yield n
    n.stop()


def call(node, method: str, path: str, json: Any = None, auth=ADMIN) -> tuple[int, Any]:
    async def go() -> tuple[int, Any]:
        async with (
            aiohttp.ClientSession() as s,
            s.request(method, node.http_url + API + path, auth=auth, json=json) as r,
        ):
            return r.status, await r.json(content_type=None)

    return asyncio.run(go())


def admin(node, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "waystation.gateway.cli", "admin", "--url", node.http_url]
        + ["--user", "admin", "--password", "adminpw", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def send(node, address: str, body: str) -> None:
    conn, got = connect(node.stomp_port, login="app", passcode="secret")
    conn.send(address, body, receipt="r", headers={"persistent": "true"})
    got.wait_receipt("r")
    conn.disconnect()


def depth(node, queue: str) -> int:
    status, body = call(node, "GET", f"/queues/{queue}")
    assert status == 200, body
    return int(body["depth"])


DIVERT = {"name": "d", "address": "x", "target": "y"}
NEW_ENDPOINTS = [
    ("GET", "/overview", None),
    ("POST", "/addresses", {"name": "a"}),
    ("DELETE", "/addresses/a", None),
    ("GET", "/diverts", None),
    ("POST", "/diverts", DIVERT),
    ("DELETE", "/diverts/d", None),
    ("POST", "/bridges/to-b/pause", None),
    ("POST", "/bridges/to-b/resume", None),
]


@pytest.mark.parametrize(("method", "path", "body"), NEW_ENDPOINTS)
def test_new_endpoints_refuse_a_missing_or_wrong_login_and_audit_it(node, method, path, body):
    failed = re.compile(rf"failed login 'admin' from 127\.0\.0\.1:\d+ on {method} {API}{path}:")
    before = len(failed.findall(node.log()))
    assert call(node, method, path, body, auth=None)[0] == 401
    status, answer = call(node, method, path, body, auth=aiohttp.BasicAuth("admin", "wrong"))
    assert status == 401, answer
    assert len(failed.findall(node.log())) == before + 1  # audited, once
    assert call(node, method, path, body, auth=APP)[0] == 403  # logged in, but no manage


def test_queues_are_checked_as_the_config_file_checks_them(node):
    for bad, why in (
        ({"name": "a.#"}, "name"),  # a wildcard is no queue name
        ({"name": unique("q"), "routing": "broadcast"}, "routing"),
        ({"name": unique("q"), "max_consumers": -5}, "max_consumers"),
        ({"name": unique("q"), "colour": "red"}, "colour"),  # unknown keys refused
        ({"name": unique("q"), "filter": "a = = 1"}, "filter"),
    ):
        status, body = call(node, "POST", "/queues", bad)
        assert status == 400 and why in body["error"], (bad, body)
    q = unique("made")
    status, body = call(node, "POST", "/queues", {"name": q, "max_consumers": 1})
    assert status == 201 and body["durable"] is True, body
    assert call(node, "POST", "/queues", {"name": q})[0] == 409
    status, body = call(node, "POST", "/queues", {"name": unique("x")}, auth=OPS)
    assert status == 403, body  # ops manages ops.# only


def test_addresses_are_created_and_deleted(node):
    a = unique("news")
    status, body = call(node, "POST", "/addresses", {"name": a})
    assert status == 201 and body == {"name": a, "routing": "multicast"}, body
    listed = {x["name"]: x for x in call(node, "GET", "/addresses")[1]["addresses"]}
    assert listed[a]["routing"] == "multicast"
    assert call(node, "POST", "/addresses", {"name": "bad.*"})[0] == 400
    assert call(node, "POST", "/addresses", {"name": a, "routing": "anycast"})[0] == 404
    q = unique("sub")
    assert (
        call(node, "POST", "/queues", {"name": q, "address": a, "routing": "multicast"})[0] == 201
    )
    status, body = call(node, "DELETE", f"/addresses/{a}")
    assert status == 400 and q in body["error"], body  # a queue is bound to it
    assert call(node, "DELETE", f"/queues/{q}")[0] == 200
    assert call(node, "DELETE", f"/addresses/{a}")[0] == 200
    assert a not in {x["name"] for x in call(node, "GET", "/addresses")[1]["addresses"]}
    assert call(node, "DELETE", f"/addresses/{a}")[0] == 404


def test_a_divert_copies_messages_and_loops_are_refused(node):
    src, dst = unique("orders"), unique("audit")
    for q in (src, dst):
        assert call(node, "POST", "/queues", {"name": q})[0] == 201
    d = unique("copy")
    status, body = call(node, "POST", "/diverts", {"name": d, "address": src, "target": dst})
    assert status == 201 and body["target"] == dst and body["exclusive"] is False, body
    send(node, f"/queue/{src}", "hello")
    assert (depth(node, src), depth(node, dst)) == (1, 1)
    status, body = call(
        node, "POST", "/diverts", {"name": unique("back"), "address": dst, "target": src}
    )
    assert status == 400 and "loop" in body["error"], body
    status, body = call(node, "POST", "/diverts", {"name": d, "address": "x", "target": "y"})
    assert status == 400 and "exists" in body["error"], body
    status, body = call(node, "POST", "/diverts", {"name": unique("d"), "address": src})
    assert status == 400 and "target" in body["error"], body
    assert d in [x["name"] for x in call(node, "GET", "/diverts")[1]["diverts"]]
    assert call(node, "DELETE", f"/diverts/{d}")[0] == 200
    send(node, f"/queue/{src}", "not copied")
    assert (depth(node, src), depth(node, dst)) == (2, 1)
    assert call(node, "DELETE", f"/diverts/{d}")[0] == 404


def test_bridges_are_paused_and_resumed(node):
    status, body = call(node, "POST", "/bridges/to-b/pause")
    assert status == 200 and body["name"] == "to-b" and body["paused"] is True, body
    assert call(node, "GET", "/bridges")[1]["bridges"][0]["paused"] is True
    status, body = call(node, "POST", "/bridges/to-b/resume")
    assert status == 200 and body["paused"] is False, body
    assert call(node, "POST", "/bridges/nope/pause")[0] == 404
    assert call(node, "POST", "/bridges/to-b/pause", auth=OPS)[0] == 403
    r = admin(node, "bridges", "--pause", "to-b")
    assert r.returncode == 0 and "paused" in r.stdout, r.stderr
    r = admin(node, "--json", "bridges", "--resume", "to-b")
    assert r.returncode == 0 and json.loads(r.stdout)["paused"] is False, r.stderr
    r = admin(node, "bridges", "--pause", "nope")
    assert r.returncode == 1 and "404" in r.stderr


def test_the_cli_creates_lists_and_deletes(node):
    q, t, d = unique("cliq"), unique("clit"), unique("clid")
    r = admin(node, "create", "queue", q, "--filter", "colour = 'red'")
    assert r.returncode == 0, r.stderr
    r = admin(node, "--json", "queues")
    assert next(x for x in json.loads(r.stdout)["queues"] if x["name"] == q)["filter"]
    assert admin(node, "create", "address", t).returncode == 0
    r = admin(node, "create", "divert", d, t, q)
    assert r.returncode == 0, r.stderr
    assert d in admin(node, "diverts").stdout
    r = admin(node, "create", "queue", "bad.#")
    assert r.returncode == 1 and "400" in r.stderr
    for kind, name in (("divert", d), ("address", t), ("queue", q)):
        r = admin(node, "delete", kind, name)
        assert r.returncode == 0, (kind, r.stderr)
    assert d not in admin(node, "diverts").stdout


def test_run_time_changes_are_kept_over_a_reload_and_a_restart_keeps_durable_queues(
    tmp_path,
):
    n = secured_node(tmp_path).start()
    try:
        q, t, d = unique("keep"), unique("topic"), unique("div")
        assert call(n, "POST", "/queues", {"name": q})[0] == 201
        assert call(n, "POST", "/addresses", {"name": t})[0] == 201
        assert call(n, "POST", "/diverts", {"name": d, "address": t, "target": q})[0] == 201
        assert call(n, "POST", "/reload")[0] == 200
        assert call(n, "GET", f"/queues/{q}")[0] == 200
        assert d in [x["name"] for x in call(n, "GET", "/diverts")[1]["diverts"]]
        n.restart()
        assert call(n, "GET", f"/queues/{q}")[0] == 200  # durable: in the journal
        assert call(n, "GET", "/diverts")[1]["diverts"] == []
        assert t not in {x["name"] for x in call(n, "GET", "/addresses")[1]["addresses"]}
    finally:
        n.stop()
