"""STOMP over TLS: the listener's tls table is honoured; plain clients are turned away."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl

import stomp
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from nodekit import NodeProcess
from stompkit import Collect


def self_signed(tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_stomp_over_tls(tmp_path):
    cert, key = self_signed(tmp_path)
    node = NodeProcess(
        tmp_path / "node", stomp_scheme="tls", stomp=f'tls = {{ cert = "{cert}", key = "{key}" }}'
    ).start()
    try:
        conn = stomp.Connection12([("127.0.0.1", node.stomp_port)])
        conn.set_ssl(for_hosts=[("127.0.0.1", node.stomp_port)], ca_certs=str(cert))
        lst = Collect()
        conn.set_listener("c", lst)
        conn.connect("guest", "guest", wait=True)
        conn.subscribe("/queue/secure", id="s")
        conn.send("/queue/secure", "over tls")
        assert lst.wait_messages(1)[0].body == "over tls"
        conn.disconnect()
        # a plain-text client gets no STOMP service
        with socket.create_connection(("127.0.0.1", node.stomp_port), timeout=5) as s:
            s.sendall(b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00")
            try:
                reply = s.recv(4096)
            except (ConnectionResetError, TimeoutError):
                reply = b""
            assert not reply.startswith(b"CONNECTED")
        # and the certificate is what the node serves
        ctx = ssl.create_default_context(cafile=str(cert))
        with (
            socket.create_connection(("127.0.0.1", node.stomp_port)) as raw,
            ctx.wrap_socket(raw, server_hostname="localhost") as tls,
        ):
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
    finally:
        node.stop()
