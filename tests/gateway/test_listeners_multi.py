"""Several listeners per protocol (``[[acceptors.<protocol>.extra]]``): a plain and a TLS
STOMP listener side by side on one node, http and https sharing one REST state, a client
certificate login over an extra TLS listener, and the config refusing clashes clearly."""

from __future__ import annotations

import base64
import socket
import ssl
import time

import aiohttp
import paho.mqtt.client as mqtt
import pytest
import stomp
from nodekit import NodeProcess, free_port, wait_port
from paho.mqtt.enums import CallbackAPIVersion
from restkit import consume, post
from stompkit import Collect, connect, unique
from test_stomp_tls import self_signed

from waystation.config import ConfigError, parse_config

SECURITY = """
[security]
enabled = true

[[users]]
name = "app"
password = "secret"
roles = ["rw"]

[[users]]
name = "device"
certificate = "CN=localhost"
roles = ["rw"]

[[permissions]]
match = "#"
send = ["rw"]
consume = ["rw"]
create_durable_queue = ["rw"]
create_non_durable_queue = ["rw"]
"""


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    root = tmp_path_factory.mktemp("multi-certs")
    server = self_signed(root)
    client_dir = root / "client"
    client_dir.mkdir()
    client = self_signed(client_dir)  # self-signed: the node trusts it as its own CA
    return server, client


@pytest.fixture(scope="module")
def node(tmp_path_factory, certs):
    (cert, key), (client_cert, _) = certs
    tls = f'tls = {{ cert = "{cert}", key = "{key}", ca = "{client_cert}" }}'
    mutual = tls.replace(" }", ", require_client_cert = true }")
    stomp_tls, https, mqtts = free_port(), free_port(), free_port()
    extra = f"""
[[acceptors.stomp.extra]]
url = "tls://127.0.0.1:{stomp_tls}"
{tls}

[[acceptors.http.extra]]
url = "https://127.0.0.1:{https}"
{tls}

[[acceptors.mqtt.extra]]
url = "tls://127.0.0.1:{mqtts}"
{mutual}
{SECURITY}
"""
    n = NodeProcess(tmp_path_factory.mktemp("multi"), extra_config=extra, http=True, mqtt=True)
    n.extra_ports = {"stomp.1": stomp_tls, "http.1": https, "mqtt.1": mqtts}  # type: ignore[attr-defined]
    n.start()
    try:
        for port in n.extra_ports.values():  # type: ignore[attr-defined]
            wait_port(port, proc=n.proc)
    except BaseException:
        n.kill9()
        raise
    yield n
    n.stop()


def tls_stomp(port: int, cert, client=None) -> tuple[stomp.Connection, Collect]:  # noqa: ANN001
    conn = stomp.Connection12([("127.0.0.1", port)], heartbeats=(0, 0))
    kw = {"cert_file": str(client[0]), "key_file": str(client[1])} if client else {}
    conn.set_ssl(for_hosts=[("127.0.0.1", port)], ca_certs=str(cert), **kw)
    got = Collect()
    conn.set_listener("c", got)
    return conn, got


def test_plain_and_tls_stomp_side_by_side(node, certs):
    (cert, _), _ = certs
    q = unique("side")
    plain, got = connect(node.stomp_port, login="app", passcode="secret")
    plain.subscribe(f"/queue/{q}", id="s")
    secure, sent = tls_stomp(node.extra_ports["stomp.1"], cert)
    secure.connect("app", "secret", wait=True)
    secure.send(f"/queue/{q}", "over tls, read in plain", headers={"receipt": "r"})
    sent.wait_receipt("r")
    assert got.wait_messages(1)[0].body == "over tls, read in plain"
    secure.disconnect()
    plain.disconnect()
    log = node.log()
    assert f"STOMP listening on tcp://127.0.0.1:{node.stomp_port}" in log
    assert f"STOMP listening on tls://127.0.0.1:{node.extra_ports['stomp.1']}" in log


def test_the_tls_listener_is_tls_and_the_plain_one_is_not(node, certs):
    (cert, _), _ = certs
    ctx = ssl.create_default_context(cafile=str(cert))
    with (
        socket.create_connection(("127.0.0.1", node.extra_ports["stomp.1"]), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
    with (
        socket.create_connection(("127.0.0.1", node.stomp_port), timeout=5) as raw,
        pytest.raises(ssl.SSLError),
    ):
        ctx.wrap_socket(raw, server_hostname="localhost")


def test_a_client_certificate_logs_in_over_an_extra_tls_listener(node, certs):
    """MQTT on a mutual-TLS extra listener: the certificate is the login (no password)."""
    (cert, _), (client_cert, client_key) = certs
    codes: list[int] = []
    got: list[bytes] = []
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=unique("dev"))
    c.tls_set(ca_certs=str(cert), certfile=str(client_cert), keyfile=str(client_key))
    c.on_connect = lambda cl, ud, flags, rc, props: codes.append(int(rc.value))
    c.on_message = lambda cl, ud, m: got.append(m.payload)
    c.on_subscribe = lambda *a: c.publish("multi/t", b"by certificate", qos=1)
    c.connect("127.0.0.1", node.extra_ports["mqtt.1"])
    c.loop_start()
    try:
        end = time.monotonic() + 10
        while not codes and time.monotonic() < end:
            time.sleep(0.02)
        assert codes == [0]
        c.subscribe("multi/t", qos=1)
        while not got and time.monotonic() < end:
            time.sleep(0.02)
        assert got == [b"by certificate"]
    finally:
        c.disconnect()
        c.loop_stop()


def test_stomp_client_certificate_login_over_the_tls_listener(node, certs):
    (cert, _), client = certs
    conn, got = tls_stomp(node.extra_ports["stomp.1"], cert, client)
    try:
        conn.connect(wait=True)  # no login, no passcode: the certificate names "device"
    except stomp.exception.ConnectFailedException:
        pytest.fail(f"refused: {[e.body for e in got.errors]}")
    conn.disconnect()


def test_http_and_https_share_one_rest_state(node, certs, run):
    (cert, _), _ = certs
    https = f"https://127.0.0.1:{node.extra_ports['http.1']}"
    ctx = ssl.create_default_context(cafile=str(cert))
    q = unique("https")

    async def go() -> None:
        auth = {"Authorization": "Basic " + base64.b64encode(b"app:secret").decode()}
        async with aiohttp.ClientSession(
            headers=auth, connector=aiohttp.TCPConnector(ssl=ctx)
        ) as s:
            await post(s, f"{https}/queues/{q}/create", b"posted over https")
            async with s.post(f"{node.http_url}/queues/{q}/pull-consumers") as r:
                assert r.status == 201, await r.text()
                nxt = r.headers["msg-consume-next"]
            # the consumer made over http, used over https: one registry behind both ports
            got = await consume(s, nxt.replace(node.http_url, https), wait=5)
            assert (got.status, got.body) == (200, b"posted over https")

    run(go())


def _problems(text: str) -> str:
    with pytest.raises(ConfigError) as e:
        parse_config(text)
    return str(e.value)


def test_config_refuses_clashing_and_half_made_listeners():
    text = _problems(
        """
[acceptors.stomp]
url = "tcp://127.0.0.1:61613"
[[acceptors.stomp.extra]]
url = "tcp://127.0.0.1:61613"
[[acceptors.http.extra]]
url = "http://0.0.0.0:5672"
[[acceptors.mqtt.extra]]
url = "tcp://127.0.0.2:61613"
"""
    )
    assert "acceptors.stomp.extra[0].url: port 61613 is already used by acceptors.stomp.url" in text
    assert "port 5672 is already used by acceptors.http.extra[0].url" in text
    assert "mqtt" not in text  # another address, the same port: fine
    text = _problems('[[acceptors.stomp.extra]]\nurl = "tls://127.0.0.1:61614"\n')
    assert "acceptors.stomp.extra[0].tls: URL scheme 'tls' needs a tls table" in text
    text = _problems('[[acceptors.amqp.extra]]\nurl = "https://127.0.0.1:5673"\n')
    assert "acceptors.amqp.extra[0].url: URL scheme must be one of tcp, tls" in text
    ok = parse_config(
        '[[acceptors.stomp.extra]]\nurl = "tcp://127.0.0.1:0"\n'
        '[[acceptors.stomp.extra]]\nurl = "tcp://127.0.0.1:0"\n'
    )
    assert [ep.port for ep, _ in ok.acceptors.stomp.listeners()] == [61613, 0, 0]
