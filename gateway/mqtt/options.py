"""The MQTT listener's settings, read from ``[acceptors.mqtt]`` (the defaults here serve
in-process tests that build a session without a config)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from waystation.config.listeners import MqttAcceptor


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


def options_from(acceptor: MqttAcceptor) -> MqttOptions:
    """The options of one listener, from its ``[acceptors.mqtt]`` table."""
    expiry = int(acceptor.max_session_expiry.total_seconds())
    return MqttOptions(
        max_packet_size=acceptor.max_packet_size,
        max_client_id=acceptor.max_client_id,
        max_keepalive=int(acceptor.max_keepalive.total_seconds()),
        receive_maximum=acceptor.receive_maximum,
        max_inflight=acceptor.max_inflight,
        topic_alias_maximum=acceptor.max_topic_aliases,
        max_session_expiry=expiry,
        session_expiry_311=expiry,  # 3.1.1 persistent sessions get the cap too
        max_subscriptions=acceptor.max_subscriptions,
        max_qos=acceptor.max_qos,
    )


__all__ = ["MqttOptions", "options_from"]
