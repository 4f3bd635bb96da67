"""Security issue 27, finding 5: an MQTT saved session belongs to the user who made it.

Another user connecting with its client id is refused (CONNACK 3.1.1 return code 5, v5
0x87 not authorized), whether it asks to resume (clean 0) or to start clean (clean 1): it is
not told "session present", does not drop the owner's subscriptions and does not wipe the
session; the owner finds it whole, after a kill -9 too (the owner is saved with the state).
While the owner is connected, another user cannot take the client id over either.  A real
node with security on, paho clients."""

from __future__ import annotations

import pytest
from pahokit import V5, V311, MqttNode, Paho, props5
from rawmqtt import USERS

NOT_AUTHORIZED = 0x87  # paho reports 3.1.1's return code 5 as this reason code too


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = MqttNode(tmp_path_factory.mktemp("mqtt-owner"), extra_config=USERS)
    n.start()
    yield n
    n.stop()


def client(node: MqttNode, cid: str, version: int, user: str, clean: bool = False) -> Paho:
    expiry = props5(SessionExpiryInterval=600) if version == V5 and not clean else None
    password = {"alice": "a", "bob": "b"}[user]
    return Paho(node.mqtt_port, cid, version, clean, user, password, properties=expiry)


def refused(node: MqttNode, cid: str, version: int, user: str, clean: bool) -> None:
    c = client(node, cid, version, user, clean)
    flags, rc, _ = c.connect(expect_ok=False)
    c.c.loop_stop()
    assert rc.value == NOT_AUTHORIZED, rc
    assert not flags.session_present


@pytest.mark.parametrize("version", [V311, V5])
def test_another_user_cannot_resume_see_or_wipe_an_offline_session(node, version):
    cid, topic = f"owned-{version}", f"own/{version}"
    owner = client(node, cid, version, "alice")
    owner.connect()
    owner.subscribe(topic, 1)
    owner.close()

    refused(node, cid, version, "bob", clean=False)  # resume
    refused(node, cid, version, "bob", clean=True)  # wipe
    pub = client(node, "bob-pub", version, "bob", clean=True)
    pub.connect()
    pub.publish(topic, b"kept for alice", 1)  # queues in alice's subscription
    pub.close()

    node.kill9()  # the owner is saved with the session
    node.start()
    refused(node, cid, version, "bob", clean=True)

    back = client(node, cid, version, "alice")
    flags, _, _ = back.connect()
    assert flags.session_present
    assert [m.payload for m in back.wait_messages(1)] == [b"kept for alice"]
    back.close()
    wipe = client(node, cid, version, "alice", clean=True)
    wipe.connect()
    wipe.close()
    # the session is over: the client id is free for anyone
    free = client(node, cid, version, "bob", clean=True)
    free.connect()
    free.close()


@pytest.mark.parametrize("version", [V311, V5])
def test_another_user_cannot_take_over_a_live_connection(node, version):
    cid = f"live-{version}"
    owner = client(node, cid, version, "alice", clean=True)
    owner.connect()
    owner.subscribe(f"live/{version}", 1)
    refused(node, cid, version, "bob", clean=True)
    refused(node, cid, version, "bob", clean=False)
    owner.publish(f"live/{version}", b"still here", 1)  # the owner's connection goes on
    assert [m.payload for m in owner.wait_messages(1)] == [b"still here"]
    assert not owner.disconnects
    again = client(node, cid, version, "alice", clean=True)  # its own user takes it over
    again.connect()
    assert owner.wait(lambda: bool(owner.disconnects))
    owner.c.loop_stop()  # before paho reconnects it
    again.close()
