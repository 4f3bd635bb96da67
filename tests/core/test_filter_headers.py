"""Header identifiers in selectors: message fields under JMS, HornetQ, Artemis and WS names."""

from __future__ import annotations

import pytest

from waystation.core.filter import compile_filter
from waystation.core.message import Message


def msg(**kw: object) -> Message:
    base: dict[str, object] = {"id": 42, "address": "orders.eu"}
    base.update(kw)
    return Message(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "message", "expected"),
    [
        ("HQDurable = 'DURABLE'", msg(durable=True), True),
        ("HQDurable = 'DURABLE'", msg(durable=False), False),
        ("HQDurable = 'NON_DURABLE'", msg(durable=False), True),
        ("WSDurable = 'DURABLE'", msg(durable=True), True),
        ("JMSDeliveryMode = 'PERSISTENT'", msg(durable=True), True),
        ("JMSDeliveryMode = 'NON_PERSISTENT'", msg(durable=False), True),
        ("HQPriority BETWEEN 5 AND 9", msg(priority=7), True),
        ("HQPriority BETWEEN 5 AND 9", msg(priority=4), False),
        ("JMSPriority = 4", msg(), True),
        ("WSPriority > 8", msg(priority=9), True),
        ("AMQPriority = 1", msg(priority=1), True),
        (
            "HQPriority = 3 AND animal = 'aardvark'",
            msg(priority=3, properties={"animal": "aardvark"}),
            True,
        ),
        ("HQPriority = 3 AND animal = 'aardvark'", msg(priority=3, properties={}), False),
        ("JMSTimestamp = 1000", msg(timestamp=1000), True),
        ("HQTimestamp > 999 AND WSTimestamp < 1001", msg(timestamp=1000), True),
        ("JMSExpiration = 0", msg(), True),
        ("HQExpiration > 0", msg(expiration=5), True),
        ("JMSMessageID = 'ID:42'", msg(), True),
        ("JMSMessageID LIKE 'ID:%'", msg(), True),
        ("WSAddress = 'orders.eu'", msg(), True),
        ("WSAddress LIKE 'orders.%'", msg(), True),
        ("HQSize > 64", msg(body=b"x" * 10), True),
        ("HQSize = WSSize", msg(), True),
        ("color = 'red'", msg(properties={"color": "red"}), True),
        ("color = 'red'", msg(properties={"color": "blue"}), False),
        ("color IS NULL", msg(), True),
        # A header name always means the header; a same-named property cannot spoof it.
        ("JMSPriority = 9", msg(priority=1, properties={"JMSPriority": 9}), False),
        ("JMSPriority = 1", msg(priority=1, properties={"JMSPriority": 9}), True),
        ("JMSPriority IS NULL", msg(), False),
        ("JMSCorrelationID = 'c1'", msg(properties={"JMSCorrelationID": "c1"}), True),
    ],
)
def test_headers_on_messages(text: str, message: Message, expected: bool) -> None:
    f = compile_filter(text)
    assert f is not None
    assert f.matches(message) is expected


def test_headers_are_plain_keys_in_matches_properties() -> None:
    f = compile_filter("JMSPriority > 5 AND HQDurable = 'DURABLE'")
    assert f is not None
    assert f.matches_properties({"JMSPriority": 7, "HQDurable": "DURABLE"})
    assert not f.matches_properties({"JMSPriority": 3, "HQDurable": "DURABLE"})
    assert not f.matches_properties({})


def test_size_header_tracks_message_size() -> None:
    m = msg(body=b"x" * 100)
    f = compile_filter(f"HQSize = {m.size()}")
    assert f is not None and f.matches(m)
