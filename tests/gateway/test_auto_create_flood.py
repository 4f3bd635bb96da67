"""Issue 27, finding 4, against a real node: a low-privilege user publishing to 10,050
distinct topics (MQTT QoS 0, as the attack was made; STOMP) fills only its own quota of
auto-created addresses (``max_auto_created_per_user``, 1000), never the node's
(``max_auto_created``, 10000): other users still create queues, topics and subscriptions.
What it made goes once unused (``auto_delete_addresses_delay``), and the user can create
again.  The node's memory during the attack is printed (run with ``-s``) and bounded."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
import stomp
from nodekit import NodeProcess
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.subscribeoptions import SubscribeOptions
from stompkit import connect, unique

pytestmark = pytest.mark.timeout(120)

CONFIG = """
[[users]]
name = "attacker"
password = "a"
roles = ["device"]

[[users]]
name = "victim"
password = "v"
roles = ["device"]

[[permissions]]
match = "#"
send = ["device"]
consume = ["device"]
create_non_durable_queue = ["device"]
create_durable_queue = ["device"]

[address_settings."#"]
auto_delete_addresses_delay = "4s"
"""
TOPICS = 10_050
QUOTA = 1000  # max_auto_created_per_user's default
QUOTA_EXCEEDED = 0x97


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(tmp_path_factory.mktemp("auto-create"), extra_config=CONFIG, mqtt=True)
    n.start()
    yield n
    n.stop()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


class Client:
    """A paho MQTT 5 client that keeps each PUBACK's and SUBACK's reason codes."""

    def __init__(self, port: int, user: str, password: str) -> None:
        self.c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=unique(user), protocol=5)
        self.c.username_pw_set(user, password)
        self.acks: dict[int, list[int]] = {}
        self.messages: list[bytes] = []
        self.cond = threading.Condition()
        self.c.on_publish = lambda c, u, mid, rc, p: self._ack(mid, [rc])
        self.c.on_subscribe = lambda c, u, mid, rcs, p: self._ack(mid, rcs)
        self.c.on_message = self._message
        self.c.connect("127.0.0.1", port)
        self.c.loop_start()

    def _ack(self, mid: int, codes: list[Any]) -> None:
        with self.cond:
            self.acks[mid] = [int(getattr(rc, "value", rc)) for rc in codes]
            self.cond.notify_all()

    def _message(self, c: Any, u: Any, msg: mqtt.MQTTMessage) -> None:
        with self.cond:
            self.messages.append(msg.payload)
            self.cond.notify_all()

    def wait(self, pred: Any, timeout: float = 10.0) -> bool:
        with self.cond:
            return self.cond.wait_for(pred, timeout)

    def probe(self, topic: str) -> int:
        """PUBLISH QoS 1 and wait for its PUBACK: the reason code (0: accepted)."""
        info = self.c.publish(topic, b"probe", 1)
        assert self.wait(lambda: info.mid in self.acks), f"no PUBACK for {topic}"
        return self.acks[info.mid][0]

    def subscribe(self, topic: str) -> int:
        rc, mid = self.c.subscribe(topic, options=SubscribeOptions(qos=1))
        assert rc == mqtt.MQTT_ERR_SUCCESS
        assert self.wait(lambda: mid in self.acks), f"no SUBACK for {topic}"
        return self.acks[mid][0]

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def test_mqtt_flood_of_topics_fills_only_the_users_quota_and_is_reaped(node):
    pid = node.proc.pid
    attacker = Client(node.mqtt_port, "attacker", "a")
    before = rss_mib(pid)
    peak = [before]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss_mib(pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.monotonic()
    for i in range(TOPICS):
        attacker.c.publish(f"flood/{i}", b"x", 0)
    # the probe's PUBACK comes after every earlier PUBLISH was handled (one connection)
    assert attacker.probe("flood/probe-1") == QUOTA_EXCEEDED
    # the attacker's own subscriptions are refused too (its quota), with the v5 reason; asked
    # at once, before its unused addresses can age past the delay on a slow machine
    assert attacker.subscribe("flood/new-sub") == QUOTA_EXCEEDED
    took = time.monotonic() - t0
    stop.set()
    sampler.join()
    after = rss_mib(pid)
    print(
        f"\n{TOPICS} topics in {took:.2f}s: node RSS {before:.1f} MiB before, "
        f"{peak[0]:.1f} MiB peak, {after:.1f} MiB after"
    )
    assert peak[0] - before < 64, (before, peak[0])

    # another user is untouched: a new topic, a subscription, a STOMP queue
    victim = Client(node.mqtt_port, "victim", "v")
    assert victim.subscribe("victim/inbox") == 1  # granted QoS 1
    assert victim.probe("victim/inbox") == 0
    assert victim.wait(lambda: victim.messages == [b"probe"])
    assert victim.probe(f"victim/{unique('new')}") == 0
    conn, got = connect(node.stomp_port, login="victim", passcode="v")
    q = unique("victim-queue")
    conn.send(f"/queue/{q}", "mine", headers={"receipt": "r1"})
    got.wait_receipt("r1")
    conn.subscribe(f"/queue/{q}", id="1", ack="auto")
    assert [m.body for m in got.wait_messages(1)] == ["mine"]
    conn.disconnect()

    # once unused past the delay its addresses go, and it may create again
    deadline = time.monotonic() + 20
    n = 0
    while attacker.probe(f"flood/after-{n}") != 0:
        assert time.monotonic() < deadline, "the attacker's addresses were never reaped"
        n += 1
        time.sleep(0.2)
    attacker.close()
    victim.close()


def test_stomp_flood_of_topics_stops_at_the_users_quota(node):
    conn, got = connect(node.stomp_port, login="attacker", passcode="a")
    prefix = unique("stomp-flood")
    for i in range(QUOTA + 50):
        if got.errors:
            break
        try:
            conn.send(f"/topic/{prefix}.{i}", "x")
        except stomp.exception.NotConnectedException:
            break  # the node closed the connection after its ERROR
    err = got.wait_error()
    assert "max_auto_created_per_user" in err.headers["message"], err.headers
    other, seen = connect(node.stomp_port, login="victim", passcode="v")
    other.subscribe(f"/topic/{unique('fine')}", id="1")
    other.send(f"/queue/{unique('fine')}", "x", headers={"receipt": "r"})
    seen.wait_receipt("r")
    assert not seen.errors
    other.disconnect()
