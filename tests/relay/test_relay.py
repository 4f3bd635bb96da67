"""``waystation relay``: stomp.py, paho-mqtt and proton, unchanged, reach a remote node from
behind a real squid that refuses CONNECT and WebSocket upgrades and wants credentials; the
tunnel rides out a squid restart with nothing lost; ws and connect fail clearly there, work
through a squid that allows them, and a lost upstream closes its client."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
import time

import paho.mqtt.client as mqtt
import pytest
from nodekit import ROOT, NodeProcess, free_port, wait_port
from paho.mqtt.enums import CallbackAPIVersion
from proton import Message
from proton.utils import BlockingConnection
from relaykit import RelayThread
from stompkit import connect, unique

from waystation.client.relay import RelayError, RelaySpec

AUTH = ("relay", "s3cret")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(
        tmp_path_factory.mktemp("relay-node"),
        http='[acceptors.http.tunnel]\nresponse_time = "2s"\n',
        amqp=True,
        mqtt=True,
    ).start()
    yield n
    n.stop()


@pytest.fixture(scope="module")
def squid():
    from squidkit import Squid

    with Squid(deny_connect=True, deny_upgrade=True, auth=AUTH) as s:
        yield s


def proxy_of(squid) -> str:  # noqa: ANN001
    return f"http://{AUTH[0]}:{AUTH[1]}@127.0.0.1:{squid.port}"


def test_stomp_py_through_the_tunnel_relay(node, squid):
    q = unique("relay")
    with RelayThread(node.http_url, proxy=proxy_of(squid)) as relay:
        conn, got = connect(relay.port)
        conn.subscribe(f"/queue/{q}", id="s", ack="auto")
        conn.send(f"/queue/{q}", "hello through squid", headers={"receipt": "r"})
        got.wait_receipt("r")
        assert got.wait_messages(1)[0].body == "hello through squid"
        conn.disconnect()
    log = squid.access_log()
    assert re.search(rf"POST {node.http_url}/tunnel/open\S* relay ", log), log[-2000:]


def test_paho_mqtt_through_the_tunnel_relay(node, squid):
    topic = unique("relay/t")
    got: list[bytes] = []
    ready = threading.Event()
    arrived = threading.Event()
    with RelayThread(node.http_url, protocol="mqtt", proxy=proxy_of(squid)) as relay:
        c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=unique("paho"))
        c.on_subscribe = lambda *a: ready.set()

        def on_message(client, userdata, msg) -> None:  # noqa: ANN001
            got.append(msg.payload)
            arrived.set()

        c.on_message = on_message
        c.connect("127.0.0.1", relay.port, keepalive=30)
        c.loop_start()
        try:
            c.subscribe(topic, qos=1)
            assert ready.wait(15)
            c.publish(topic, b"mqtt through squid", qos=1).wait_for_publish(15)
            assert arrived.wait(15)
            assert got == [b"mqtt through squid"]
        finally:
            c.disconnect()
            c.loop_stop()
    assert re.search(r"POST \S+/tunnel/open\S* relay ", squid.access_log())


def test_proton_through_the_tunnel_relay(node, squid):
    q = unique("relay-amqp")
    with RelayThread(node.http_url, protocol="amqp", proxy=proxy_of(squid)) as relay:
        c = BlockingConnection(f"amqp://127.0.0.1:{relay.port}", timeout=20)
        try:
            c.create_sender(f"/queue/{q}").send(Message(body="amqp through squid"))
            rcv = c.create_receiver(f"/queue/{q}", credit=1)
            assert rcv.receive(timeout=15).body == "amqp through squid"
            rcv.accept()
        finally:
            c.close()
    assert re.search(r"POST \S+/tunnel/open\S* relay ", squid.access_log())


def test_tunnel_relay_rides_out_a_squid_restart_nothing_lost(node, squid):
    n = 2000
    q = unique("relay-restart")
    with RelayThread(node.http_url, proxy=proxy_of(squid)) as relay:
        consumer, got = connect(relay.port)
        consumer.subscribe(f"/queue/{q}", id="s", ack="auto")
        producer, sent = connect(relay.port)
        for i in range(n // 2):
            producer.send(f"/queue/{q}", f"{i:05d}")
        producer.send(f"/queue/{q}", "", headers={"receipt": "half"})
        sent.wait_receipt("half", 30)
        restart = threading.Thread(target=squid.restart, args=(0.5,))
        restart.start()
        during = 0
        for i in range(n // 2, n):  # paced, so squid goes down and comes back meanwhile
            producer.send(f"/queue/{q}", f"{i:05d}")
            if i % 50 == 49:
                time.sleep(0.02)
                during += restart.is_alive()
        restart.join()
        producer.send(f"/queue/{q}", "", headers={"receipt": "all"})
        sent.wait_receipt("all", 60)
        bodies = [m.body for m in got.wait_messages(n + 2, timeout=60) if m.body]
        assert bodies == [f"{i:05d}" for i in range(n)]
        assert during >= 3  # the restart was mid-stream
        time.sleep(0.3)
        assert len(got.messages) == n + 2  # nothing beyond (two empty markers)
        assert not got.disconnected and not sent.disconnected  # the clients never noticed
        assert relay.stats["accepted"] == 2 and relay.stats["upstream_failed"] == 0
        failures = [s["failures"] for s in relay.relay.tunnel_stats]
        assert all(f >= 1 for f in failures), failures  # the restart did cut both tunnels
        producer.disconnect()
        consumer.disconnect()


@pytest.mark.parametrize("via", ["ws", "connect"])
def test_ws_and_connect_through_the_strict_squid_close_the_client(node, squid, via):
    to = node.http_url if via == "ws" else f"tcp://127.0.0.1:{node.stomp_port}"
    with RelayThread(to, via=via, proxy=proxy_of(squid)) as relay:
        with socket.create_connection(("127.0.0.1", relay.port), timeout=15) as s:
            s.sendall(b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00")
            assert s.recv(4096) == b""  # closed: no upstream
        assert relay.stats["upstream_failed"] == 1


def test_ws_and_connect_through_a_permissive_squid_and_a_lost_upstream(node, make_squid):
    squid = make_squid(deny_connect=False, deny_upgrade=False, auth=AUTH)
    squid.conf.write_text(
        squid.conf.read_text() + "http_upgrade_request_protocols websocket allow all\n"
    )
    squid.start()
    for to, via in ((node.http_url, "ws"), (f"tcp://127.0.0.1:{node.stomp_port}", "connect")):
        q = unique(f"relay-{via}")
        with RelayThread(to, via=via, proxy=proxy_of(squid)) as relay:
            conn, got = connect(relay.port)
            conn.subscribe(f"/queue/{q}", id="s", ack="auto")
            conn.send(f"/queue/{q}", via, headers={"receipt": "r"})
            got.wait_receipt("r")
            assert got.wait_messages(1)[0].body == via
            squid.restart()  # the upstream goes with it: the client is closed
            assert got.wait(lambda c=got: c.disconnected, 15), via
            assert relay.stats["open"] == 0
    log = squid.access_log()
    assert f"CONNECT 127.0.0.1:{node.stomp_port}" in log or "TCP_TUNNEL" in log, log[-2000:]


def test_spec_checks_and_defaults():
    s = RelaySpec.parse("127.0.0.1:61613", "http://hub:8161")
    assert (s.via, s.upstream_url()) == ("tunnel", "http://hub:8161/tunnel")
    s = RelaySpec.parse("127.0.0.1:1883", "https://hub:8443", protocol="mqtt", via="ws")
    assert s.upstream_url() == "wss://hub:8443/mqtt"
    s = RelaySpec.parse(":5672", "tls://hub:5671", protocol="amqp", proxy="http://u:p%40ss@px:3128")
    assert (s.via, s.proxy_url, s.proxy_auth) == ("connect", "http://px:3128", ("u", "p@ss"))
    for bad, match in (
        (("nope", "http://h:1"), "listen"),
        (("h:1", "http://h:1", "xmpp"), "protocol"),
        (("h:1", "http://h:1", "stomp", "connect"), "own port"),
        (("h:1", "tcp://h:1", "stomp", "tunnel"), "http/https"),
        (("h:1", "http://h:1", "stomp", None, "socks5://p:1"), "proxy"),
    ):
        with pytest.raises(RelayError, match=match):
            RelaySpec.parse(*bad)  # type: ignore[arg-type]


def test_cli_relay_runs_and_refuses_bad_arguments(node, squid):
    bad = subprocess.run(
        [sys.executable, "-m", "waystation.gateway.cli", "relay", "--listen", "x", "--to", "y"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode == 2 and "listen: expected host:port" in bad.stderr
    port = free_port()
    args = ["--listen", f"127.0.0.1:{port}", "--to", node.http_url, "--proxy", proxy_of(squid)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "waystation.gateway.cli", "relay", *args],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_port(port, proc=proc)  # type: ignore[arg-type]
        q = unique("cli")
        conn, got = connect(port)
        conn.subscribe(f"/queue/{q}", id="s")
        conn.send(f"/queue/{q}", "via the cli relay")
        assert got.wait_messages(1)[0].body == "via the cli relay"
        conn.disconnect()
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert "stomp relay 127.0.0.1:" in err and "(tunnel) via proxy" in err, err
