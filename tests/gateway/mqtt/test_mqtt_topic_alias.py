"""Topic aliases from the node to MQTT 5 clients: a new topic goes with an alias and the
topic, a repeat with the alias and an empty topic, never more aliases than the client
allows; off for clients that allow none and when the listener says so."""

from __future__ import annotations

import pytest
from mqtt_inproc_kit import MQTT_5, Client, in_engine, settle
from pahokit import V5, MqttNode, Paho, props5

from waystation.wire.mqtt import Publish, Subscribe, SubscriptionRequest


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = MqttNode(tmp_path_factory.mktemp("mqtt-alias")).start()
    yield n
    n.stop()


def wire(m) -> tuple[str, int | None, bytes]:
    """What the PUBLISH carried: paho hands the topic name and alias over as received."""
    return m.topic, getattr(m.properties, "TopicAlias", None), m.payload


def test_paho_v5_gets_aliases_up_to_its_maximum(node):
    s = Paho(node.mqtt_port, "alias-sub", V5, properties=props5(TopicAliasMaximum=2))
    plain = Paho(node.mqtt_port, "alias-plain", V5)  # allows no aliases
    p = Paho(node.mqtt_port, "alias-pub", V5)
    for c in (s, plain, p):
        c.connect()
    try:
        s.subscribe("al/#", 1)
        plain.subscribe("al/#", 1)
        sent = [("al/a", b"1"), ("al/a", b"2"), ("al/b", b"3"), ("al/c", b"4"), ("al/c", b"5")]
        for topic, body in sent:
            p.publish(topic, body, 1)
        got = [wire(m) for m in s.wait_messages(5)]
        assert got == [
            ("al/a", 1, b"1"),  # new: alias and topic
            ("", 1, b"2"),  # repeat: the alias alone
            ("al/b", 2, b"3"),
            ("al/c", None, b"4"),  # the client's maximum (2) is reached: full topics
            ("al/c", None, b"5"),
        ]
        assert [wire(m) for m in plain.wait_messages(5)] == [(t, None, b) for t, b in sent]
    finally:
        for c in (s, plain, p):
            c.close()


def test_aliases_can_be_turned_off(run):
    async def go(engine):
        s = Client(engine, MQTT_5, send_topic_aliases=False)
        s.connect("s", properties={"topic_alias_maximum": 10})
        s.send(Subscribe(1, [SubscriptionRequest("x/#", 0)]))
        await settle()
        s.recv()
        p = Client(engine, MQTT_5)
        p.connect("p")
        p.send(Publish("x/y", b"1"), Publish("x/y", b"2"))
        await settle()
        got = s.recv()
        assert [(m.topic, m.properties.get("topic_alias")) for m in got] == [
            ("x/y", None),
            ("x/y", None),
        ]

    in_engine(run, go)


def test_a_dropped_publish_does_not_leave_its_alias_behind(run):
    """A message over the client's maximum packet size is not sent [MQTT-3.1.2-25]: the
    next one on that topic must still carry the topic, or the client cannot resolve it."""

    async def go(engine):
        s = Client(engine, MQTT_5)
        s.connect("s", properties={"topic_alias_maximum": 5, "maximum_packet_size": 200})
        s.send(Subscribe(1, [SubscriptionRequest("big/#", 0)]))
        await settle()
        s.recv()
        p = Client(engine, MQTT_5)
        p.connect("p")
        p.send(Publish("big/t", b"x" * 500), Publish("big/t", b"small"), Publish("big/t", b"2"))
        await settle()
        got = s.recv()
        assert [(m.topic, m.properties.get("topic_alias"), m.payload) for m in got] == [
            ("big/t", 1, b"small"),
            ("", 1, b"2"),
        ]

    in_engine(run, go)
