"""``waystation admin ...`` against a real node, and ``waystation hash-password``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from nodekit import ROOT, NodeProcess
from opskit import secured_node
from stompkit import connect, unique


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = secured_node(
        tmp_path_factory.mktemp("ops-cli"),
        '[address_settings."cli.#"]\ndead_letter_address = "DLQ"\nmax_delivery_attempts = 1\n',
    ).start()
    yield n
    n.stop()


def waystation(
    *args: str, stdin: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "waystation.gateway.cli", *args],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=ROOT,
        timeout=60,
        env={**__import__("os").environ, **env},
    )


def admin(node, *args: str, user: str = "admin", password: str = "adminpw"):
    return waystation(
        "admin", "--url", node.http_url, "--user", user, "--password", password, *args
    )


def send(node, queue: str, bodies: list[str]) -> None:
    conn, got = connect(node.stomp_port, login="app", passcode="secret")
    for i, b in enumerate(bodies):
        conn.send(f"/queue/{queue}", b, receipt=f"r{i}", headers={"persistent": "true"})
    for i in range(len(bodies)):
        got.wait_receipt(f"r{i}")
    conn.disconnect()


def test_queues_as_a_table_and_as_json(node):
    q = unique("cli.t")
    send(node, q, ["a", "b"])
    r = admin(node, "queues")
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if q in line)
    cells = [c.strip() for c in row.split("│")[1:-1]]
    assert cells[:6] == [q, q, "anycast", "2", "0", "0"], cells
    r = admin(node, "--json", "queues")
    info = next(x for x in json.loads(r.stdout)["queues"] if x["name"] == q)
    assert info["depth"] == 2 and info["enqueued"] == 2


def test_browse_purge_and_connections(node):
    q = unique("cli.b")
    send(node, q, ["hello", "world"])
    r = admin(node, "browse", q)
    assert r.returncode == 0 and "hello" in r.stdout and "world" in r.stdout, r.stderr
    r = admin(node, "--json", "browse", q, "--limit", "1")
    assert [m["body"] for m in json.loads(r.stdout)["messages"]] == ["hello"]
    conn, _ = connect(node.stomp_port, login="app", passcode="secret")
    try:
        r = admin(node, "--json", "connections")
        conns = [c for c in json.loads(r.stdout)["connections"] if c["protocol"] == "stomp"]
        assert conns
        assert "stomp" in admin(node, "connections").stdout
        r = admin(node, "connections", "--close", conns[-1]["id"])
        assert r.returncode == 0, r.stderr
    finally:
        if conn.is_connected():
            conn.disconnect()
    r = admin(node, "purge", q)
    assert r.returncode == 0 and "removed: 2" in r.stdout


def test_retry_puts_a_dead_letter_back(node):
    q = unique("cli.r")
    send(node, q, ["bad"])
    conn, got = connect(node.stomp_port, login="app", passcode="secret")
    conn.subscribe(f"/queue/{q}", id="s", ack="client-individual")
    conn.nack(got.wait_messages(1)[0].headers["ack"], receipt="n")
    got.wait_receipt("n")
    conn.disconnect()
    dl = json.loads(admin(node, "--json", "browse", "DLQ").stdout)["messages"]
    mid = next(m["id"] for m in dl if m["original_address"] == q)
    r = admin(node, "retry", "--id", str(mid))
    assert r.returncode == 0 and "retried: 1" in r.stdout, r.stdout + r.stderr
    assert json.loads(admin(node, "--json", "browse", q).stdout)["messages"][0]["body"] == "bad"


def test_bridges_table(node):
    r = admin(node, "bridges")
    assert r.returncode == 0 and "Bridges" in r.stdout


def test_wrong_or_missing_credentials_are_refused(node):
    r = admin(node, "queues", password="wrong")
    assert r.returncode == 1 and "401" in r.stderr and "authentication failed" in r.stderr
    r = waystation("admin", "--url", node.http_url, "queues")
    assert r.returncode == 1 and "401" in r.stderr
    r = admin(node, "queues", user="app", password="secret")
    assert r.returncode == 1 and "403" in r.stderr
    assert "failed login 'admin'" in node.log()
    r = waystation("admin", "--url", "http://127.0.0.1:9", "queues")
    assert r.returncode == 3 and "cannot reach" in r.stderr


def test_the_environment_names_node_and_user(node):
    r = waystation(
        "admin",
        "--json",
        "queues",
        WAYSTATION_URL=node.http_url,
        WAYSTATION_USER="admin",
        WAYSTATION_PASSWORD="adminpw",
    )
    assert r.returncode == 0 and "queues" in json.loads(r.stdout)


def test_hash_password_from_a_pipe_makes_a_working_login(tmp_path):
    r = waystation("hash-password", stdin="s3cret pw\n")
    assert r.returncode == 0, r.stderr
    digest = r.stdout.strip()
    assert digest.startswith("pbkdf2_sha256$")
    n = NodeProcess(
        tmp_path,
        f'[[users]]\nname = "u"\npassword_hash = "{digest}"\nroles = ["r"]\n'
        '[[permissions]]\nmatch = "#"\nsend = ["r"]\n',
    ).start()
    try:
        conn, _ = connect(n.stomp_port, login="u", passcode="s3cret pw")
        conn.disconnect()
        import stomp

        with pytest.raises(stomp.exception.ConnectFailedException):
            connect(n.stomp_port, login="u", passcode="s3cret")
    finally:
        n.stop()
    assert waystation("hash-password", stdin="").returncode == 2
