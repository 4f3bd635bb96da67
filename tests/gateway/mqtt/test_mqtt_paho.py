"""paho-mqtt (3.1.1 and 5) against a real ``waystation run`` process: every QoS both ways,
wildcards, STOMP interop, retained messages, wills, takeover, malformed input, logins."""

from __future__ import annotations

import socket
import time

import pytest
import stompkit
from nodekit import SECURITY_USERS
from pahokit import V5, V311, MqttNode, Paho, props5


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = MqttNode(tmp_path_factory.mktemp("mqtt")).start()
    yield n
    n.stop()


@pytest.mark.parametrize("version", [V311, V5])
def test_pub_sub_every_qos_with_wildcards(node, version):
    tag = f"v{version}"
    s = Paho(node.mqtt_port, f"s-{tag}", version)
    s.connect()
    assert [
        int(rc.value if hasattr(rc, "value") else rc) for rc in s.subscribe(f"{tag}/+/t", 2)
    ] == [2]
    p = Paho(node.mqtt_port, f"p-{tag}", version)
    p.connect()
    for q in (0, 1, 2):
        p.publish(f"{tag}/dev{q}/t", f"q{q}".encode(), q)
    p.publish(f"{tag}/dev/other", b"not matched", 1)
    got = s.wait_messages(3)
    assert sorted((m.topic, m.payload, m.qos) for m in got) == [
        (f"{tag}/dev0/t", b"q0", 0),
        (f"{tag}/dev1/t", b"q1", 1),
        (f"{tag}/dev2/t", b"q2", 2),
    ]
    time.sleep(0.2)
    assert len(s.messages) == 3
    s.close()
    p.close()


def test_mqtt_and_stomp_meet_on_one_address(node):
    conn, seen = stompkit.connect(node.stomp_port)
    conn.subscribe("/topic/interop.a", id="1", ack="auto")
    m5 = Paho(node.mqtt_port, "interop", V5)
    m5.connect()
    m5.subscribe("interop/b")
    time.sleep(0.2)
    m5.publish(
        "interop/a", b"from mqtt", 1, ContentType="text/plain", UserProperty=[("color", "red")]
    )
    [f] = seen.wait_messages(1)
    assert f.body == "from mqtt"
    assert f.headers["color"] == "red" and f.headers["content-type"] == "text/plain"
    conn.send("/topic/interop.b", "from stomp", headers={"size": "L", "persistent": "true"})
    [m] = m5.wait_messages(1)
    assert (m.topic, m.payload, m.qos) == ("interop/b", b"from stomp", 0)
    assert ("size", "L") in m.properties.UserProperty
    conn.disconnect()
    m5.close()


def test_retained_message_reaches_a_later_subscriber(node):
    p = Paho(node.mqtt_port, "ret-p")
    p.connect()
    p.publish("ret/room1", b"22C", 1, retain=True)
    s = Paho(node.mqtt_port, "ret-s", V5)
    s.connect()
    s.subscribe("ret/#", 1)
    [m] = s.wait_messages(1)
    assert (m.topic, m.payload, m.retain) == ("ret/room1", b"22C", True)
    p.publish("ret/room1", b"", 1, retain=True)  # cleared
    s2 = Paho(node.mqtt_port, "ret-s2")
    s2.connect()
    s2.subscribe("ret/#", 1)
    time.sleep(0.3)
    assert [m.payload for m in s2.messages] == []
    for c in (p, s, s2):
        c.close()


def test_will_is_published_when_a_client_vanishes(node):
    w = Paho(node.mqtt_port, "will-w")
    w.connect()
    w.subscribe("status/#", 1)
    d = Paho(node.mqtt_port, "will-d", will=("status/will-d", b"offline", 1, False))
    d.connect()
    d.drop()
    [m] = w.wait_messages(1)
    assert (m.topic, m.payload) == ("status/will-d", b"offline")
    ok = Paho(node.mqtt_port, "will-ok", will=("status/will-ok", b"offline", 1, False))
    ok.connect()
    ok.close()  # DISCONNECT: no will
    time.sleep(0.3)
    assert len(w.messages) == 1
    w.close()


def test_takeover_disconnects_the_first_client(node):
    a = Paho(node.mqtt_port, "twin", V5)
    a.connect()
    b = Paho(node.mqtt_port, "twin", V5)
    b.connect()
    assert a.wait(lambda: bool(a.disconnects))
    assert int(a.disconnects[0].value) == 0x8E  # session taken over
    a.c.loop_stop()
    b.close()


def test_malformed_packet_closes_only_that_connection(node):
    s = Paho(node.mqtt_port, "mal-s")
    s.connect()
    s.subscribe("mal/t")
    raw = socket.create_connection(("127.0.0.1", node.mqtt_port), timeout=5)
    raw.sendall(b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00")  # CONNECT, empty id
    assert raw.recv(4) == b"\x20\x02\x00\x00"
    raw.sendall(b"\x30\xff\xff\xff\xff\x7f")  # remaining length over four bytes
    assert raw.recv(10) == b""  # closed, nothing said (3.1.1)
    raw.close()
    p = Paho(node.mqtt_port, "mal-p")
    p.connect()
    p.publish("mal/t", b"fine", 1)
    assert [m.payload for m in s.wait_messages(1)] == [b"fine"]
    s.close()
    p.close()


def test_keepalive_timeout_drops_a_silent_client(node):
    w = Paho(node.mqtt_port, "ka-w")
    w.connect()
    w.subscribe("ka/#")
    raw = socket.create_connection(("127.0.0.1", node.mqtt_port), timeout=5)
    # CONNECT keepalive 1 s with a will on ka/gone
    will_topic, will_msg = b"ka/gone", b"silent"
    var = b"\x00\x04MQTT\x04\x06\x00\x01"
    payload = b"\x00\x02ka" + len(will_topic).to_bytes(2, "big") + will_topic
    payload += len(will_msg).to_bytes(2, "big") + will_msg
    raw.sendall(b"\x10" + bytes([len(var) + len(payload)]) + var + payload)
    assert raw.recv(4) == b"\x20\x02\x00\x00"
    t0 = time.monotonic()
    assert raw.recv(10) == b""  # closed after 1.5 x keep-alive
    assert 1.4 < time.monotonic() - t0 < 3.0
    assert [m.payload for m in w.wait_messages(1)] == [b"silent"]
    raw.close()
    w.close()


@pytest.fixture(scope="module")
def secure_node(tmp_path_factory):
    extra = (
        SECURITY_USERS
        + """
[[permissions]]
match = "open.#"
send = ["ro", "rw"]
consume = ["ro", "rw"]
create_non_durable_queue = ["ro", "rw"]
"""
    )
    n = MqttNode(tmp_path_factory.mktemp("mqtt-sec"), extra_config=extra).start()
    yield n
    n.stop()


@pytest.mark.parametrize("version", [V311, V5])
def test_refused_credentials(secure_node, version):
    c = Paho(secure_node.mqtt_port, f"bad-{version}", version, username="app", password="nope")
    flags, rc, _ = c.connect(expect_ok=False)
    c.c.loop_stop()
    assert rc.is_failure
    assert int(rc.value) in (0x86, 4)  # bad user name or password (3.1.1: 4)


def test_permissions_give_reason_codes(secure_node):
    ro = Paho(secure_node.mqtt_port, "ro5", V5, username="reader", password="r")
    ro.connect()
    codes = ro.subscribe("open/x", 1) + ro.subscribe("closed/x", 1)
    assert [int(c.value) for c in codes] == [1, 0x87]
    app = Paho(secure_node.mqtt_port, "app5", V5, username="app", password="secret")
    app.connect()
    app.publish("open/x", b"hello", 1)
    assert [m.payload for m in ro.wait_messages(1)] == [b"hello"]
    ro.close()
    app.close()


def test_persistent_session_survives_a_restart(tmp_path):
    node = MqttNode(tmp_path).start()
    try:
        s = Paho(
            node.mqtt_port, "dev-7", V5, clean=False, properties=props5(SessionExpiryInterval=3600)
        )
        s.connect()
        s.subscribe("cmd/dev-7/#", 1)
        s.close()
        p = Paho(node.mqtt_port, "ctl")
        p.connect()
        p.publish("cmd/dev-7/reboot", b"now", 1)
        p.publish("cfg/dev-7", b"v2", 1, retain=True)
        p.close()
        node.restart()
        back = Paho(
            node.mqtt_port, "dev-7", V5, clean=False, properties=props5(SessionExpiryInterval=3600)
        )
        flags, rc, _ = back.connect()
        assert flags.session_present
        [m] = back.wait_messages(1)
        assert (m.topic, m.payload, m.qos) == ("cmd/dev-7/reboot", b"now", 1)
        back.subscribe("cfg/#", 1)
        assert [m.payload for m in back.wait_messages(2)][1:] == [b"v2"]  # retained, kept
        back.close()
    finally:
        node.stop()


def test_session_expiry_runs_on_after_a_restart(tmp_path):
    node = MqttNode(tmp_path).start()
    try:
        for cid in ("short", "long"):
            expiry = 2 if cid == "short" else 3600
            s = Paho(
                node.mqtt_port,
                cid,
                V5,
                clean=False,
                properties=props5(SessionExpiryInterval=expiry),
            )
            s.connect()
            s.subscribe(f"exp/{cid}", 1)
            s.close()
        node.restart()  # the node stops within the 2 s, and starts again
        time.sleep(3.0)
        for cid, present in (("short", False), ("long", True)):
            back = Paho(
                node.mqtt_port, cid, V5, clean=False, properties=props5(SessionExpiryInterval=60)
            )
            flags, _, _ = back.connect()
            assert flags.session_present is present, cid
            back.close()
    finally:
        node.stop()
