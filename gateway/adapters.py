"""The protocol adapters this build carries, by name (one line each; see gateway/adapter.py).

AMQP is listed without importing its package: that pulls in python-qpid-proton (about 6 MB
resident and a fifth of the start-up imports), which a node only needs once an AMQP client
connects.  The first AMQP connection (or refusal) imports it, a one-off few tens of ms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from waystation.gateway.adapter import ProtocolAdapter
from waystation.gateway.mqtt import ADAPTER as MQTT
from waystation.gateway.stomp import ADAPTER as STOMP

if TYPE_CHECKING:
    from waystation.core.engine import Engine
    from waystation.gateway.adapter import StreamSession
    from waystation.gateway.link import Link


def _amqp() -> ProtocolAdapter:
    from waystation.gateway.amqp import ADAPTER as AMQP

    return AMQP


def _amqp_session(engine: Engine, link: Link, acceptor: Any) -> StreamSession:
    return _amqp().new_session(engine, link, acceptor)


def _amqp_refusal(why: str) -> bytes:
    return _amqp().refusal(why)


# the same fields as gateway/amqp's ADAPTER (test_adapters checks they agree)
AMQP = ProtocolAdapter(
    name="amqp",
    new_session=_amqp_session,
    refusal=_amqp_refusal,
    subprotocols=("amqp", "AMQPWSB10"),
    text_frames=False,
)

ADAPTERS: dict[str, ProtocolAdapter] = {a.name: a for a in (STOMP, AMQP, MQTT)}

__all__ = ["ADAPTERS"]
