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
    send_topic_aliases: bool = True  # alias topics to v5 clients that accept aliases
    max_session_expiry: int = 7 * 24 * 3600  # seconds a persistent v5 session outlives its link
    # 3.1.1 clean_session=0: seconds kept while away (0xFFFFFFFF: until a clean connect)
    session_expiry_311: int = 0xFFFFFFFF
    max_subscriptions: int = 100  # topic filters per client
    max_qos: int = 2


_shared: dict[tuple[object, ...], MqttOptions] = {}


def options_from(acceptor: MqttAcceptor) -> MqttOptions:
    """The options of one listener, from its ``[acceptors.mqtt]`` table.  Connections with
    the same settings share one (read-only) instance: an idle connection should not carry
    its own copy of the listener's configuration."""
    expiry = int(acceptor.max_session_expiry.total_seconds())
    values = (
        acceptor.max_packet_size,
        acceptor.max_client_id,
        int(acceptor.max_keepalive.total_seconds()),
        acceptor.receive_maximum,
        acceptor.max_inflight,
        acceptor.max_topic_aliases,
        acceptor.send_topic_aliases,
        expiry,
        acceptor.max_subscriptions,
        acceptor.max_qos,
    )
    o = _shared.get(values)
    if o is None:
        if len(_shared) >= 64:  # settings changed by many reloads: start again
            _shared.clear()
        o = _shared[values] = MqttOptions(
            max_packet_size=values[0],
            max_client_id=values[1],
            max_keepalive=values[2],
            receive_maximum=values[3],
            max_inflight=values[4],
            topic_alias_maximum=values[5],
            send_topic_aliases=values[6],
            max_session_expiry=expiry,
            session_expiry_311=expiry,  # 3.1.1 persistent sessions get the cap too
            max_subscriptions=values[8],
            max_qos=values[9],
        )
    return o


__all__ = ["MqttOptions", "options_from"]
