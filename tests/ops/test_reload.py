"""Live reload (SIGHUP and the admin API) under load: while producers and consumers run over
STOMP and WebSocket, a queue, a divert, a user and a bridge are added; no connection drops,
nothing is lost; an invalid file is refused and the running config kept."""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.request
from base64 import b64encode

import pytest
from nodekit import SECURITY_USERS, NodeProcess
from sitekit import bridge_toml, collect, wait_log
from stompkit import connect
from websockets.sync.client import connect as ws_connect

pytestmark = pytest.mark.timeout(120)

ADMIN_USER = """
[[users]]
name = "admin"
password = "adminpw"
roles = ["admin"]
"""

SECURED = "[security]\nenabled = true\n" + SECURITY_USERS

ADDED = """
[[queues]]
name = "audit"

[[diverts]]
name = "copy-orders"
address = "orders"
target = "audit"

[[users]]
name = "newcomer"
password = "n"
roles = ["rw"]
"""


def _stomp_ws_send(port: int, n: int, out: list[str]) -> None:
    """STOMP over WebSocket: n persistent sends with receipts, one at a time."""
    with ws_connect(f"ws://127.0.0.1:{port}/stomp", subprotocols=["v12.stomp"]) as ws:  # type: ignore[list-item]
        ws.send("CONNECT\naccept-version:1.2\nlogin:app\npasscode:secret\n\n\x00")
        assert ws.recv(5).startswith("CONNECTED")
        for i in range(n):
            ws.send(f"SEND\ndestination:/queue/orders\npersistent:true\nreceipt:w{i}\n\nws-{i}\x00")
            while "RECEIPT" not in ws.recv(10):
                pass
            out.append(f"ws-{i}")
            time.sleep(0.002)


def test_sighup_adds_a_queue_divert_user_and_bridge_under_load(tmp_path):
    b = NodeProcess(tmp_path / "b", name="site-b", extra_config=SECURED).start()
    a = NodeProcess(tmp_path / "a", name="site-a", extra_config=SECURED, http=True).start()
    try:
        consumer, got = connect(a.stomp_port, login="app", passcode="secret")
        consumer.subscribe("/queue/orders", id="1", ack="client-individual")
        producer, plst = connect(a.stomp_port, login="app", passcode="secret")
        sent: list[str] = []
        ws_sent: list[str] = []

        def produce() -> None:
            for i in range(600):
                producer.send(
                    "/queue/orders", f"tcp-{i}", headers={"persistent": "true", "receipt": f"r{i}"}
                )
                sent.append(f"tcp-{i}")
                time.sleep(0.003)

        threads = [
            threading.Thread(target=produce),
            threading.Thread(target=_stomp_ws_send, args=(a.http_port, 300, ws_sent)),
        ]
        for t in threads:
            t.start()
        time.sleep(0.5)
        with a.config_path.open("a") as f:  # the file grows a queue, a divert, a user, a bridge
            f.write(
                ADDED + bridge_toml("to-b", "site-b", [b.stomp_port], user="app", password="secret")
            )
        a.proc.send_signal(signal.SIGHUP)
        wait_log(a, r"reload: bridge 'to-b' added", 10)
        for t in threads:
            t.join(60)
        everything = sent + ws_sent
        assert got.wait(lambda: len(got.messages) >= len(everything), 30)
        for m in got.messages:
            consumer.ack(m.headers["ack"])
        assert sorted(m.body for m in got.messages) == sorted(everything)  # nothing lost
        assert not got.disconnected and not plst.disconnected  # nobody dropped
        log = a.log()
        for change in ("queue 'audit' created", "divert 'copy-orders' added", "security: 4 users"):
            assert f"reload: {change}" in log
        # the divert copies what arrives from now on; the new user logs in; the bridge works
        producer.send("/queue/orders", "after", headers={"persistent": "true", "receipt": "ra"})
        assert plst.wait(lambda: "ra" in plst.receipts, 10)
        copies = collect(a.stomp_port, "audit", ["after"], 10, login="app", passcode="secret")
        assert copies[-1] == "after" and set(copies[:-1]) <= set(everything)  # from the reload on
        newcomer, nl = connect(a.stomp_port, login="newcomer", passcode="n")
        newcomer.send("/queue/site-b::far", "over", headers={"persistent": "true", "receipt": "x"})
        assert nl.wait(lambda: "x" in nl.receipts, 10)
        assert collect(b.stomp_port, "far", ["over"], 20, login="app", passcode="secret") == [
            "over"
        ]
        for c in (consumer, producer, newcomer):
            c.disconnect()
    finally:
        a.stop()
        b.stop()


def _reload(node: NodeProcess, user: str, password: str) -> tuple[int, dict]:
    req = urllib.request.Request(f"{node.http_url}/admin/api/v1/reload", method="POST", data=b"{}")
    req.add_header("Content-Type", "application/json")  # any other body is refused (415)
    req.add_header("Authorization", "Basic " + b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, {"text": e.read().decode()}


def test_reload_from_the_api_and_an_invalid_file_is_refused(tmp_path):
    manage = SECURED.replace(
        'delete_non_durable_queue = ["rw"]', 'delete_non_durable_queue = ["rw"]\nmanage = ["admin"]'
    )
    node = NodeProcess(tmp_path / "n", extra_config=manage + ADMIN_USER, http=True).start()
    try:
        assert _reload(node, "app", "secret")[0] == 403  # no manage permission
        status, body = _reload(node, "admin", "adminpw")
        assert status == 200 and body == {"changes": []}
        good = node.config_path.read_text()
        node.config_path.write_text(good + "\n[[queues]]\nname = 'late'\n")
        status, body = _reload(node, "admin", "adminpw")
        assert status == 200 and body["changes"] == ["queue 'late' created"]
        node.config_path.write_text(good + "\n[[queues]]\nname = 42\n")
        status, body = _reload(node, "admin", "adminpw")
        assert status == 400 and "running config kept" in body["text"]
        node.proc.send_signal(signal.SIGHUP)  # the same file by signal: refused, node runs on
        wait_log(node, r"reload refused: invalid configuration", 10)
        conn, lst = connect(node.stomp_port, login="app", passcode="secret")
        conn.send("/queue/late", "still here", headers={"receipt": "r"})
        assert lst.wait(lambda: "r" in lst.receipts, 5)
        conn.disconnect()
    finally:
        node.stop()
