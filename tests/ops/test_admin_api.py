"""The admin API of a real node: every endpoint, and refusals that are audited."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from opskit import ADMIN, APP, OPS, secured_node
from stompkit import connect, unique

API = "/admin/api/v1"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = secured_node(
        tmp_path_factory.mktemp("ops-admin"),
        '[address_settings."dl.#"]\ndead_letter_address = "DLQ"\nmax_delivery_attempts = 1\n'
        '[address_settings."dl2.#"]\ndead_letter_address = "ops.DLQ2"\nmax_delivery_attempts = 1\n',
    ).start()
    yield n
    n.stop()


def call(
    node, method: str, path: str, auth: aiohttp.BasicAuth | None = ADMIN, json: Any = None
) -> tuple[int, Any, dict[str, str]]:
    async def go() -> tuple[int, Any, dict[str, str]]:
        async with (
            aiohttp.ClientSession() as s,
            s.request(method, node.http_url + API + path, auth=auth, json=json) as r,
        ):
            body = await r.json(content_type=None)
            return r.status, body, dict(r.headers)

    return asyncio.run(go())


def send(node, queue: str, bodies: list[str], **headers: str) -> None:
    conn, got = connect(node.stomp_port, login="app", passcode="secret")
    try:
        for i, b in enumerate(bodies):
            conn.send(
                f"/queue/{queue}", b, receipt=f"r{i}", headers={"persistent": "true", **headers}
            )
        for i in range(len(bodies)):
            got.wait_receipt(f"r{i}")
    finally:
        conn.disconnect()


def depth(node, queue: str) -> int:
    status, body, _ = call(node, "GET", f"/queues/{queue}")
    assert status == 200, body
    return int(body["depth"])


def test_missing_credentials_get_401_without_a_challenge_and_are_audited(node):
    # no Basic challenge: a browser would prompt, then send those credentials for any page
    status, body, headers = call(node, "GET", "/queues", auth=None)
    assert status == 401 and "error" in body
    assert "WWW-Authenticate" not in headers
    status, body, headers = call(node, "GET", "/queues", auth=aiohttp.BasicAuth("admin", "nope"))
    assert status == 401 and "WWW-Authenticate" not in headers
    log = node.log()
    assert "waystation.audit: refused GET /admin/api/v1/queues" in log
    assert "waystation.audit: failed login 'admin'" in log


def test_a_user_without_manage_gets_403_and_is_audited(node):
    status, body, _ = call(node, "GET", "/queues", auth=APP)
    assert status == 403, body
    status, body, _ = call(node, "GET", "/connections", auth=OPS)
    assert status == 403, body
    assert "denied GET /admin/api/v1/connections to 'ops'" in node.log()


def test_manage_on_a_pattern_shows_and_acts_on_those_queues_only(node):
    mine, other = unique("ops.q"), unique("other")
    send(node, mine, ["a"])
    send(node, other, ["b"])
    status, body, _ = call(node, "GET", "/queues", auth=OPS)
    names = {q["name"] for q in body["queues"]}
    assert status == 200 and mine in names and other not in names
    assert call(node, "DELETE", f"/queues/{other}/messages", auth=OPS)[0] == 403
    assert depth(node, other) == 1
    assert call(node, "DELETE", f"/queues/{mine}/messages", auth=OPS)[1]["removed"] == 1


def test_list_addresses_and_queues_with_depth_and_consumers(node):
    q = unique("lst")
    send(node, q, ["1", "2", "3"])
    conn, _ = connect(node.stomp_port, login="app", passcode="secret")
    try:
        conn.subscribe(
            f"/queue/{q}", id="s", ack="client", headers={"prefetch-count": "1"}, receipt="s"
        )
        _.wait_receipt("s")
        status, body, _h = call(node, "GET", "/queues")
        info = next(x for x in body["queues"] if x["name"] == q)
        assert status == 200
        assert (info["depth"], info["in_flight"], info["consumers"]) == (2, 1, 1)
        assert info["enqueued"] == 3 and info["routing"] == "anycast"
        status, body, _h = call(node, "GET", "/addresses")
        addr = next(a for a in body["addresses"] if a["name"] == q)
        assert addr["queues"] == [q] and addr["routing"] == "anycast"
    finally:
        conn.disconnect()


def test_browse_shows_messages_without_taking_them(node):
    q = unique("brw")
    send(node, q, ["one", "two", "three"], colour="red")
    status, body, _ = call(node, "GET", f"/queues/{q}/messages?limit=2")
    assert status == 200, body
    assert [m["body"] for m in body["messages"]] == ["one", "two"]
    assert body["messages"][0]["properties"]["colour"] == "red"
    status, body, _ = call(node, "GET", f"/queues/{q}/messages?offset=2")
    assert [m["body"] for m in body["messages"]] == ["three"]
    assert depth(node, q) == 3
    # browsing opened and closed a core session of its own
    _, conns, _ = call(node, "GET", "/connections")
    assert not [c for c in conns["connections"] if c["protocol"] == "admin"]


def test_purge_and_delete_one_message(node):
    q = unique("prg")
    send(node, q, ["a", "b", "c"])
    _, body, _ = call(node, "GET", f"/queues/{q}/messages")
    mid = body["messages"][1]["id"]
    status, body, _ = call(node, "DELETE", f"/queues/{q}/messages/{mid}")
    assert status == 200 and body["removed"] == 1
    _, body, _ = call(node, "GET", f"/queues/{q}/messages")
    assert [m["body"] for m in body["messages"]] == ["a", "c"]
    assert call(node, "DELETE", f"/queues/{q}/messages/{mid}")[0] == 404
    status, body, _ = call(node, "DELETE", f"/queues/{q}/messages")
    assert status == 200 and body["removed"] == 2 and depth(node, q) == 0
    assert f"purged 2 messages from '{q}'" in node.log()


def poison(node, q: str) -> None:
    """Send one message to ``q`` and refuse it once: dead-lettered (1 attempt allowed)."""
    send(node, q, ["poison"])
    conn, got = connect(node.stomp_port, login="app", passcode="secret")
    try:
        conn.subscribe(f"/queue/{q}", id="s", ack="client-individual")
        m = got.wait_messages(1)[0]
        conn.nack(m.headers["ack"], receipt="n")
        got.wait_receipt("n")
        conn.unsubscribe(id="s", receipt="u")
        got.wait_receipt("u")
    finally:
        conn.disconnect()


def test_dead_letters_are_retried_to_their_original_address(node):
    q = unique("dl.q")
    poison(node, q)
    _, body, _ = call(node, "GET", "/queues/DLQ/messages")
    mine = [m for m in body["messages"] if m["original_address"] == q]
    assert len(mine) == 1 and mine[0]["dead_letter_reason"] == "max-deliveries"
    assert depth(node, q) == 0
    status, body, _ = call(node, "POST", "/queues/DLQ/retry", json={"ids": [mine[0]["id"]]})
    assert status == 200 and body["retried"] == 1, body
    _, body, _ = call(node, "GET", f"/queues/{q}/messages")
    assert [m["body"] for m in body["messages"]] == ["poison"]
    assert body["messages"][0]["dead_letter_reason"] is None


def test_move_sends_chosen_messages_elsewhere(node):
    src, dst = unique("mv"), unique("mvto")
    send(node, src, ["x", "y"])
    status, body, _ = call(node, "POST", f"/queues/{src}/move", json={"target": dst})
    assert status == 200 and body["moved"] == 2, body
    assert depth(node, src) == 0 and depth(node, dst) == 2


def test_pause_holds_deliveries_until_resume(node):
    q = unique("pau")
    status, body, _ = call(node, "POST", f"/queues/{q}/pause")
    assert status == 404
    send(node, q, ["before"])
    assert call(node, "POST", f"/queues/{q}/pause")[1]["paused"] is True
    conn, got = connect(node.stomp_port, login="app", passcode="secret")
    try:
        conn.subscribe(f"/queue/{q}", id="s", ack="auto")
        send(node, q, ["after"])
        assert not got.wait(lambda: bool(got.messages), 0.5)
        assert call(node, "POST", f"/queues/{q}/resume")[1]["paused"] is False
        assert [m.body for m in got.wait_messages(2)] == ["before", "after"]
    finally:
        conn.disconnect()


def test_create_and_delete_queues(node):
    q = unique("made")
    status, body, _ = call(node, "POST", "/queues", json={"name": q, "durable": True})
    assert status == 201 and body["name"] == q and body["depth"] == 0
    assert call(node, "POST", "/queues", json={"name": q})[0] == 409
    send(node, q, ["k"])
    status, body, _ = call(node, "DELETE", f"/queues/{q}")
    assert status == 200 and body["messages"] == 1
    assert call(node, "GET", f"/queues/{q}")[0] == 404
    assert call(node, "POST", "/queues", json={"name": ""})[0] == 400


def test_connections_are_listed_and_one_is_closed(node):
    conn, got = connect(node.stomp_port, login="app", passcode="secret", **{"client-id": "c1"})
    try:
        conn.subscribe(f"/queue/{unique('cx')}", id="s", receipt="s")
        got.wait_receipt("s")
        _, body, _ = call(node, "GET", "/connections")
        mine = [c for c in body["connections"] if c["protocol"] == "stomp" and c["user"] == "app"]
        assert mine and all({"id", "remote", "since", "messages_in"} <= set(c) for c in mine)
        target = mine[-1]["id"]
        status, body, _ = call(node, "DELETE", f"/connections/{target}")
        assert status == 200
        assert got.wait(lambda: got.disconnected or bool(got.errors), 5)
        _, body, _ = call(node, "GET", "/connections")
        assert target not in {c["id"] for c in body["connections"]}
        assert call(node, "DELETE", f"/connections/{target}")[0] == 404
    finally:
        if conn.is_connected():
            conn.disconnect()


def test_bridges_list_answers(node):
    status, body, _ = call(node, "GET", "/bridges")
    assert status == 200 and isinstance(body["bridges"], list)


def test_retry_needs_manage_where_the_messages_go(node):
    q = unique("dl2.q")
    poison(node, q)
    # "ops" manages ops.DLQ2 but not dl2.*, where its dead letter would go back to
    status, body, _ = call(node, "POST", "/queues/ops.DLQ2/retry", auth=OPS)
    assert status == 403 and q in body["error"], body
    assert depth(node, "ops.DLQ2") == 1 and depth(node, q) == 0
    status, body, _ = call(node, "POST", "/queues/ops.DLQ2/retry")
    assert status == 200 and body["retried"] == 1 and depth(node, q) == 1
