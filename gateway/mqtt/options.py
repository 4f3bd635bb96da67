"""The MQTT listener's settings, read from ``[acceptors.mqtt]`` (defaults where a field is
absent, so the adapter runs before the config grows them)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any


@dataclass(slots=True)
class MqttOptions:
    max_packet_size: int = 1 << 20  # bytes, both ways (CONNACK announces it to v5 clients)
    max_client_id: int = 256  # characters of a client id
    max_keepalive: int = 65535  # seconds; a v5 client asking more is told server_keep_alive
    keepalive_grace: float = 1.5  # a client silent for grace x keep-alive is gone [MQTT-3.1.2-24]
    receive_maximum: int = 100  # QoS 1/2 PUBLISHes a client may have unacknowledged to us
    max_inflight: int = 100  # QoS 1/2 deliveries unacknowledged by a client (its window)
    topic_alias_maximum: int = 100  # aliases a v5 client may use towards us
    max_session_expiry: int = 7 * 24 * 3600  # seconds a persistent v5 session outlives its link
    # 3.1.1 clean_session=0: seconds kept while away (0xFFFFFFFF: until a clean connect)
    session_expiry_311: int = 0xFFFFFFFF
    max_subscriptions: int = 100  # topic filters per client
    max_qos: int = 2


def _seconds(v: Any) -> int:
    if isinstance(v, timedelta):
        return int(v.total_seconds())
    return int(v)


def options_from(acceptor: Any) -> MqttOptions:
    """The options of one listener (``MqttAcceptor``; any object, fields looked up by name)."""
    o = MqttOptions()
    for name in (
        "max_packet_size",
        "max_client_id",
        "receive_maximum",
        "max_inflight",
        "topic_alias_maximum",
        "max_subscriptions",
        "max_qos",
    ):
        v = getattr(acceptor, name, None)
        if v is not None:
            setattr(o, name, int(v))
    for name in ("max_keepalive", "max_session_expiry"):
        v = getattr(acceptor, name, None)
        if v is not None:
            setattr(o, name, _seconds(v))
    aliases = getattr(acceptor, "max_topic_aliases", None)  # the config's name
    if aliases is not None:
        o.topic_alias_maximum = int(aliases)
    if getattr(acceptor, "max_session_expiry", None) is not None:
        o.session_expiry_311 = o.max_session_expiry  # 3.1.1 persistent sessions get it too
    return o


__all__ = ["MqttOptions", "options_from"]
