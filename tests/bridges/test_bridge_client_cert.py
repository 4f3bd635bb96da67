"""A bridge that logs in by its TLS client certificate: the remote's mutual-TLS STOMP listener
maps the certificate's subject to a routing user, so the bridge config holds no password."""

from __future__ import annotations

import time

import pytest
from nodekit import NodeProcess
from sitekit import FAST_LINK, toml_value
from stompkit import Collect
from test_stomp_tls import self_signed

from waystation.config import ConfigError, parse_config

REMOTE_SECURITY = """
[security]
enabled = true

[[users]]
name = "site-a"
certificate = "CN=localhost"
roles = ["bridge"]
nodes = ["site-a"]

[[users]]
name = "reader"
password = "secret"
roles = ["reader"]

[[permissions]]
match = "#"
send = ["bridge"]
consume = ["reader"]
create_durable_queue = ["bridge", "reader"]
"""


def bridge_config(port: int, server_cert, client: tuple | None) -> str:  # noqa: ANN001
    opts = "".join(f"{k} = {toml_value(v)}\n" for k, v in FAST_LINK.items())
    cert = f'tls_cert = "{client[0]}"\ntls_key = "{client[1]}"\n' if client else ""
    return f"""
[[bridges]]
name = "to-b"
remote_node = "site-b"
urls = ["tls://127.0.0.1:{port}"]
tls_ca = "{server_cert}"
{cert}{opts}"""


def remote(tmp_path, server, client_cert) -> NodeProcess:  # noqa: ANN001
    cert, key = server
    tls = f'tls = {{ cert = "{cert}", key = "{key}", ca = "{client_cert}", '
    tls += "require_client_cert = true }"
    return NodeProcess(
        tmp_path / "b",
        name="site-b",
        stomp_scheme="tls",
        stomp=tls,
        extra_config=REMOTE_SECURITY,
    )


def send(node: NodeProcess, n: int) -> None:
    from stompkit import connect

    prod, lst = connect(node.stomp_port)
    for i in range(n):
        prod.send(
            "/queue/site-b::orders", f"m{i}", headers={"persistent": "true", "receipt": f"r{i}"}
        )
    lst.wait_receipt(f"r{n - 1}")
    prod.disconnect()


def reader(port: int, server_cert, client) -> tuple:  # noqa: ANN001
    import stomp

    conn = stomp.Connection12([("127.0.0.1", port)])
    conn.set_ssl(
        for_hosts=[("127.0.0.1", port)],
        ca_certs=str(server_cert),
        cert_file=str(client[0]),
        key_file=str(client[1]),
    )
    lst = Collect()
    conn.set_listener("c", lst)
    conn.connect("reader", "secret", wait=True)
    conn.subscribe("/queue/orders", id="s")
    return conn, lst


@pytest.fixture
def certs(tmp_path):
    (tmp_path / "client").mkdir()
    return self_signed(tmp_path), self_signed(tmp_path / "client")


def test_a_bridge_logs_in_by_its_client_certificate(tmp_path, certs):
    server, client = certs
    b = remote(tmp_path, server, client[0])
    a = NodeProcess(
        tmp_path / "a", name="site-a", extra_config=bridge_config(b.stomp_port, server[0], client)
    )
    b.start()
    a.start()
    try:
        send(a, 30)
        conn, lst = reader(b.stomp_port, server[0], client)
        assert [m.body for m in lst.wait_messages(30, timeout=20)] == [f"m{i}" for i in range(30)]
        conn.disconnect()
        assert "authentication failed" not in b.log()
    finally:
        a.stop()
        b.stop()


def test_without_its_certificate_the_bridge_is_refused(tmp_path, certs):
    server, client = certs
    b = remote(tmp_path, server, client[0])
    a = NodeProcess(
        tmp_path / "a", name="site-a", extra_config=bridge_config(b.stomp_port, server[0], None)
    )
    b.start()
    a.start()
    try:
        send(a, 3)
        deadline = time.monotonic() + 15
        # TLS 1.3: the remote refuses after the handshake, so the bridge sees its CONNECT cut
        while a.log().count("bridge to-b: retrying") < 2:
            assert time.monotonic() < deadline, a.log()[-3000:]
            time.sleep(0.2)
        conn, lst = reader(b.stomp_port, server[0], client)
        time.sleep(1.0)
        assert lst.messages == []  # nothing crossed
        conn.disconnect()
    finally:
        a.stop()
        b.stop()


def test_a_key_needs_a_certificate(tmp_path):
    text = """
[[bridges]]
name = "x"
remote_node = "site-b"
urls = ["tls://127.0.0.1:61614"]
tls_key = "key.pem"
"""
    with pytest.raises(ConfigError, match="tls_key needs a tls_cert"):
        parse_config(text, tmp_path / "x.toml")
