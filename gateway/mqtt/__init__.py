"""MQTT 3.1.1 and 5: the adapter entry (see ``gateway/adapter.py`` and ``docs/mqtt.md``)."""

from __future__ import annotations

from waystation.gateway.adapter import ProtocolAdapter
from waystation.gateway.mqtt.options import MqttOptions, options_from
from waystation.gateway.mqtt.session import MqttSession
from waystation.gateway.mqtt.subscriptions import rearm
from waystation.wire.mqtt import MQTT_311, ConnAck, ReasonCode, encode

# sent to a connection refused at the door: the client's version is not known yet, and a
# 3.1.1 CONNACK "server unavailable" is what clients of both versions read as a refusal
_REFUSAL = encode(ConnAck(ReasonCode.SERVER_UNAVAILABLE), MQTT_311)


def refusal(why: str) -> bytes:
    return _REFUSAL


ADAPTER = ProtocolAdapter(
    name="mqtt",
    new_session=lambda engine, link, acceptor: MqttSession(engine, link, options_from(acceptor)),
    refusal=refusal,
    subprotocols=("mqtt", "mqttv3.1"),
    on_start=rearm,
    text_frames=False,
)

__all__ = ["ADAPTER", "MqttOptions", "MqttSession"]
