"""The topic <-> address rule (gateway/mqtt/topics.py) and the PUBLISH <-> message mapping."""

from __future__ import annotations

import pytest

from waystation.core.message import Int32, Message
from waystation.core.names import name_problem
from waystation.gateway.mqtt.mapping import (
    delivery_properties,
    message_from_publish,
    published_qos,
)
from waystation.gateway.mqtt.topics import (
    TopicError,
    address_to_topic,
    dollar_blind,
    filter_to_pattern,
    parse_filter,
    topic_to_address,
)


@pytest.mark.parametrize(
    ("topic", "address"),
    [
        ("a/b/c", "a.b.c"),
        ("sensors/k1/temp", "sensors.k1.temp"),
        ("$SYS/broker/load", "$SYS.broker.load"),
        ("/a", "%.a"),
        ("a//b", "a.%.b"),
        ("a/", "a.%"),
        ("/", "%.%"),
        ("v1.2/x", "v1%2E2.x"),
        ("with space/x", "with%20space.x"),
        ("100%/x", "100%25.x"),
        ("a*b/c#", "a%2Ab.c%23"),
        ("sf/x", "%73f.x"),
        ("größe/ü", "größe.ü"),
        ("tab\there", "tab%09here"),
    ],
)
def test_topic_and_address_map_both_ways(topic, address):
    assert topic_to_address(topic) == address
    assert name_problem(address) is None  # always a name the core accepts
    assert address_to_topic(address) == topic


def test_filters_map_wildcards():
    assert filter_to_pattern("a/+/c") == "a.*.c"
    assert filter_to_pattern("a/#") == "a.#"
    assert filter_to_pattern("#") == "#"
    assert filter_to_pattern("+/+") == "*.*"
    assert filter_to_pattern("/+") == "%.*"
    assert name_problem(filter_to_pattern("x.y/+/#"), wildcards=True) is None


def test_shared_and_dollar_rules():
    assert parse_filter("$share/g1/a/+") == ("g1", "a/+")
    assert parse_filter("a/b") == (None, "a/b")
    assert dollar_blind("#") and dollar_blind("+/x")
    assert not dollar_blind("$SYS/#") and not dollar_blind("a/#")


def test_a_topic_too_long_for_an_address_is_refused():
    with pytest.raises(TopicError, match="limit is 255"):
        topic_to_address("x" * 300)


def test_an_address_from_another_protocol_reads_as_a_topic():
    assert address_to_topic("orders.eu") == "orders/eu"
    assert address_to_topic("odd%zz") == "odd%zz"  # not an escape: left as it is


def test_publish_properties_map_to_typed_fields_and_back():
    props = {
        "user_property": [("k", "v"), ("n", "1")],
        "content_type": "application/json",
        "response_topic": "replies/c1",
        "correlation_data": b"\x01\x02",
        "message_expiry_interval": 30,
        "payload_format_indicator": 1,
    }
    m = message_from_publish(1, "a.b", b"{}", 2, True, props, 1_000_000, user="alice")
    assert m.durable and published_qos(m) == 2
    assert m.application_properties == {"k": "v", "n": "1"}
    assert m.content_type == "application/json"
    assert m.reply_to == "replies.c1"  # the topic rule: STOMP sees /topic/replies.c1
    assert m.correlation_id == b"\x01\x02"
    assert m.expiration == 1_000_000 + 30_000
    assert m.user_id == "alice"
    back = delivery_properties(m, 1_000_000 + 10_500)
    assert back == {
        "user_property": [("k", "v"), ("n", "1")],
        "content_type": "application/json",
        "response_topic": "replies/c1",
        "correlation_data": b"\x01\x02",
        "message_expiry_interval": 20,  # what is left, rounded up [MQTT-3.3.2-6]
        "payload_format_indicator": 1,
    }


def test_a_message_from_another_protocol_maps_to_v5_properties():
    m = Message(5, "a", b"x", {"count": Int32(3), "ok": True}, durable=True)
    m.correlation_id = "req-1"
    assert published_qos(m) == 1
    assert delivery_properties(m, 0) == {
        "user_property": [("count", "3"), ("ok", "true")],
        "correlation_data": b"req-1",
    }
    assert published_qos(Message(6, "a", b"")) == 0
