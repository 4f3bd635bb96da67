"""SASL EXTERNAL over a real TLS listener: a verified client certificate whose subject a user
names (``certificate``) logs in as that user; one no user names fails SASL."""

from __future__ import annotations

import pytest
from amqpnode import AmqpNode
from proton import Message, SSLDomain
from proton.utils import BlockingConnection
from test_stomp_tls import self_signed

USERS = """
[security]
enabled = true

[[users]]
name = "device"
certificate = "{subject}"
roles = ["dev"]

[[permissions]]
match = "#"
send = ["dev"]
consume = ["dev"]
create_durable_queue = ["dev"]
create_non_durable_queue = ["dev"]
"""


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    base = tmp_path_factory.mktemp("certs")
    server, client = base / "server", base / "client"
    server.mkdir()
    client.mkdir()
    return self_signed(server), self_signed(client)  # each self-signed: its own CA


def _node(tmp_path, certs, subject: str) -> AmqpNode:
    (server_cert, server_key), (client_cert, _) = certs
    tls = (
        f'tls = {{ cert = "{server_cert}", key = "{server_key}", ca = "{client_cert}", '
        "require_client_cert = true }"
    )
    node = AmqpNode(tmp_path / "node", extra_config=USERS.format(subject=subject), amqp=tls)
    port = node.amqp_port
    cfg = node.config_path.read_text().replace(f"tcp://127.0.0.1:{port}", f"tls://127.0.0.1:{port}")
    node.config_path.write_text(cfg)
    return node.start()


def _connect(node: AmqpNode, certs) -> BlockingConnection:
    (server_cert, _), (client_cert, client_key) = certs
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_credentials(str(client_cert), str(client_key), None)
    domain.set_trusted_ca_db(str(server_cert))
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER)
    return BlockingConnection(
        f"amqps://127.0.0.1:{node.amqp_port}",
        timeout=5,
        ssl_domain=domain,
        sasl_enabled_mechs="EXTERNAL",
    )


def test_external_logs_in_as_the_user_the_certificate_names(tmp_path, certs):
    node = _node(tmp_path, certs, "CN=localhost")
    try:
        c = _connect(node, certs)
        try:
            c.create_sender("/queue/tls.q").send(Message(body="over tls"))
            m = c.create_receiver("/queue/tls.q", credit=1).receive(timeout=5)
            assert m.body == "over tls"
            assert m.user_id == b"device"  # stamped with the certificate's user
        finally:
            c.close()
    finally:
        node.stop()


def test_external_with_a_certificate_no_user_names_fails_sasl(tmp_path, certs):
    node = _node(tmp_path, certs, "CN=someone-else")
    try:
        with pytest.raises(Exception) as e:
            _connect(node, certs).close()
        assert "auth" in str(e.value).lower() or "sasl" in str(e.value).lower()
        assert "no user has the certificate 'CN=localhost'" in node.log()
    finally:
        node.stop()
