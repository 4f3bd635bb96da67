"""MQTT PUBLISH <-> the core's typed message: the one place that says which is which.

=============================  ===========================================================
MQTT (PUBLISH)                 core ``Message``
=============================  ===========================================================
topic ``a/b``                  ``address`` ``a.b`` (``topics.py``)
payload                        ``body`` (bytes, untouched)
QoS 0 / 1 / 2                  ``durable`` False / True / True; QoS 2 also flagged in the
                               ``_WS_P_MQTT`` annotation so a QoS 2 subscriber gets QoS 2
RETAIN                         kept by the core as the address's retained message; flagged
                               in ``_WS_P_MQTT`` for retain-as-published
payload format indicator 1     flagged in ``_WS_P_MQTT`` (UTF-8 payload), given back to MQTT
content type                   ``content_type``
response topic ``a/b``         ``reply_to`` ``a.b`` (the same topic rule); out, a
                               ``/topic/a.b`` is ``a/b``, a ``/queue/x`` goes as written
correlation data (bytes)       ``correlation_id`` (bytes; a string or other id goes out as
                               its UTF-8 text)
message expiry interval (s)    ``expiration`` = arrival + interval (absolute ms); a
                               delivery carries what is left, rounded up [MQTT-3.3.2-6]
user properties                application properties, strings (a repeated name keeps its
                               last value); a typed property from another protocol goes out
                               as its text
(arrival time)                 ``timestamp`` (ms)
(the login, security on)       ``user_id``
subscription identifier        per subscription, added by the session on delivery
topic alias                    resolved by the session, never stored
=============================  ===========================================================

MQTT 3.1.1 has no properties: only topic, payload, QoS and RETAIN cross.
"""

from __future__ import annotations

from typing import Any

from waystation.core.message import DEFAULT_PRIORITY, Message, property_text
from waystation.gateway.mqtt.topics import TopicError, address_to_topic, topic_to_address

# one private annotation with flag bits, present only when a bit is set (QoS 2, retain,
# UTF-8 payload are the rare cases: a plain QoS 0/1 message carries no annotation at all)
FLAGS = "_WS_P_MQTT"
TOPIC_PREFIX = "/topic/"
QUEUE_PREFIX = "/queue/"
RETAIN = 1
QOS2 = 2
UTF8 = 4


def message_from_publish(
    msg_id: int,
    address: str,
    payload: bytes,
    qos: int,
    retain: bool,
    properties: dict[str, Any],
    now: int,
    user: str | None = None,
) -> Message:
    """The message for one PUBLISH to ``address`` (the topic already mapped)."""
    msg = Message(msg_id, address, payload, {}, qos > 0, DEFAULT_PRIORITY, now)
    flags = (RETAIN if retain else 0) | (QOS2 if qos == 2 else 0)
    if properties:
        flags |= _apply_properties(msg, properties, now)
    if flags:
        msg._ann = {FLAGS: flags}
    if user is not None:
        msg.user_id = user
    return msg


def _apply_properties(msg: Message, p: dict[str, Any], now: int) -> int:
    flags = 0
    for name, value in p.items():
        if name == "user_property":
            props = msg.application_properties
            for k, v in value:
                props[k] = v
        elif name == "content_type":
            msg.content_type = value
        elif name == "message_expiry_interval":
            msg.expiration = now + int(value) * 1000
        elif name == "response_topic":
            try:
                msg.reply_to = topic_to_address(value)
            except TopicError:
                msg.reply_to = value
        elif name == "correlation_data":
            msg.correlation_id = bytes(value)
        elif name == "payload_format_indicator" and value == 1:
            flags |= UTF8
        # topic_alias and subscription_identifier are the session's, not the message's
    return flags


def flags_of(msg: Message) -> int:
    a = msg._ann
    if not a:
        return 0
    f = a.get(FLAGS)
    return f if isinstance(f, int) else 0


def published_qos(msg: Message) -> int:
    """The QoS the message was published with (a non-MQTT durable message counts as 1)."""
    if not msg.durable:
        return 0
    return 2 if flags_of(msg) & QOS2 else 1


def delivery_properties(msg: Message, now: int) -> dict[str, Any]:
    """The v5 PUBLISH properties for a delivery of ``msg`` (without subscription ids)."""
    out: dict[str, Any] = {}
    props = msg._props
    if props:
        users = [(k, property_text(v)) for k, v in props.items() if not k.startswith("_WS_")]
        if users:  # the node's own (a duplicate id) stay home
            out["user_property"] = users
    if msg.expiration:
        left = (msg.expiration - now + 999) // 1000
        out["message_expiry_interval"] = left if left > 0 else 1
    if msg.has_fields():
        ct = msg.content_type
        if ct is not None:
            out["content_type"] = ct
        rt = msg.reply_to
        if rt is not None:
            out["response_topic"] = reply_topic(rt)
        cid = msg.correlation_id
        if cid is not None:
            out["correlation_data"] = cid if isinstance(cid, bytes) else str(cid).encode()
    if flags_of(msg) & UTF8:
        out["payload_format_indicator"] = 1
    return out


def reply_topic(reply_to: str) -> str:
    """The response topic for a reply-to: a STOMP/AMQP ``/topic/a.b`` is the topic ``a/b``
    (the MQTT subscribers of ``a/b`` are what it reaches); a ``/queue/x``, which no MQTT
    topic names, goes as it was written so the client can hand it to another protocol."""
    if reply_to.startswith(TOPIC_PREFIX):
        return address_to_topic(reply_to[len(TOPIC_PREFIX) :])
    if reply_to.startswith(QUEUE_PREFIX):
        return reply_to
    return address_to_topic(reply_to)


def has_properties(msg: Message) -> bool:
    """Whether a v5 delivery of ``msg`` needs :func:`delivery_properties` at all."""
    return bool(msg._props) or bool(msg.expiration) or msg.has_fields() or bool(msg._ann)


__all__ = [
    "FLAGS",
    "QOS2",
    "RETAIN",
    "UTF8",
    "delivery_properties",
    "flags_of",
    "has_properties",
    "message_from_publish",
    "published_qos",
    "reply_topic",
]
