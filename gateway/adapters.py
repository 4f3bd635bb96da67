"""The protocol adapters this build carries, by name (one line each; see gateway/adapter.py).

AMQP and MQTT are listed without importing their packages: AMQP's pulls in
python-qpid-proton (about 6 MB resident and a fifth of the start-up imports), MQTT's its
codec and session modules (half a megabyte, a tenth of the start-up CPU), and a node only
needs either once such a client connects.  The first connection (or refusal) imports the
package, a one-off few tens of ms.  MQTT's start-up work (re-arming the expiry of persistent
sessions) runs at start as before, importing the package only when there is such a session.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from waystation.gateway.adapter import ProtocolAdapter
from waystation.gateway.stomp import ADAPTER as STOMP

if TYPE_CHECKING:
    from waystation.core.engine import Engine
    from waystation.gateway.adapter import StreamSession
    from waystation.gateway.link import Link


class _Lazy:
    """An adapter package imported on first use: its sessions and refusals."""

    def __init__(self, module: str) -> None:
        self.module = module

    def adapter(self) -> ProtocolAdapter:
        adapter: ProtocolAdapter = import_module(self.module).ADAPTER
        return adapter

    def new_session(self, engine: Engine, link: Link, acceptor: Any) -> StreamSession:
        return self.adapter().new_session(engine, link, acceptor)

    def refusal(self, why: str) -> bytes:
        return self.adapter().refusal(why)


_AMQP = _Lazy("waystation.gateway.amqp")
_MQTT = _Lazy("waystation.gateway.mqtt")

MQTT_STATE = "mqtt/"  # the client-state scopes of MQTT sessions (gateway/mqtt/session.py)


def _mqtt_on_start(engine: Engine) -> object:
    """MQTT's own ``on_start``, when the store holds an MQTT session to re-arm."""
    if not engine.client_states.scopes(MQTT_STATE):
        return 0
    on_start = _MQTT.adapter().on_start
    return on_start(engine) if on_start is not None else 0


# the same fields as gateway/amqp's and gateway/mqtt's ADAPTER (tests check they agree)
AMQP = ProtocolAdapter(
    name="amqp",
    new_session=_AMQP.new_session,
    refusal=_AMQP.refusal,
    subprotocols=("amqp", "AMQPWSB10"),
    text_frames=False,
)
MQTT = ProtocolAdapter(
    name="mqtt",
    new_session=_MQTT.new_session,
    refusal=_MQTT.refusal,
    subprotocols=("mqtt", "mqttv3.1"),
    on_start=_mqtt_on_start,
    text_frames=False,
)

ADAPTERS: dict[str, ProtocolAdapter] = {a.name: a for a in (STOMP, AMQP, MQTT)}

__all__ = ["ADAPTERS", "MQTT_STATE"]
