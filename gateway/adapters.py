"""The protocol adapters this build carries, by name (one line each; see gateway/adapter.py)."""

from __future__ import annotations

from waystation.gateway.adapter import ProtocolAdapter
from waystation.gateway.amqp import ADAPTER as AMQP
from waystation.gateway.mqtt import ADAPTER as MQTT
from waystation.gateway.stomp import ADAPTER as STOMP

ADAPTERS: dict[str, ProtocolAdapter] = {a.name: a for a in (STOMP, AMQP, MQTT)}

__all__ = ["ADAPTERS"]
