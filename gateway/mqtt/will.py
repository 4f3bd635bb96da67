"""Wills: the message a client leaves for when it goes without a DISCONNECT.

Published on an ungraceful end (connection lost, keep-alive timeout, protocol error, a
takeover) or a v5 DISCONNECT with reason 0x04, after the v5 will delay or when the session
ends, whichever is first [MQTT-3.1.3-9]; a reconnect to the same session before then cancels
it.  The will is sent through a short-lived core session of the client's principal, so it is
checked like any PUBLISH (the CONNECT already checked the send permission).
"""

from __future__ import annotations

import logging

from waystation.core.engine import Engine
from waystation.core.message import now_ms
from waystation.core.queue import MULTICAST
from waystation.core.security import Principal
from waystation.gateway.mqtt.mapping import message_from_publish
from waystation.gateway.mqtt.topics import topic_to_address
from waystation.wire.mqtt import Will

log = logging.getLogger("waystation.mqtt")


def publish_will(engine: Engine, principal: Principal, remote: str, will: Will) -> None:
    """Route ``will`` now (errors are logged: nobody is left to tell)."""
    try:
        session = engine.open_session(principal, "mqtt", remote)
    except Exception as e:
        log.warning("MQTT %s: will not published: %s", remote, e)
        return
    try:
        address = topic_to_address(will.topic)
        user = principal.name if engine.secured else None
        msg = message_from_publish(
            engine.ids(),
            address,
            will.payload,
            will.qos,
            will.retain,
            will.properties,
            now_ms(),
            user,
        )
        if will.retain:
            session.send(msg, routing=MULTICAST, retain=True)
        else:
            session.send(msg, routing=MULTICAST)
    except Exception as e:
        log.warning("MQTT %s: will to %r not published: %s", remote, will.topic, e)
    finally:
        session.close()


__all__ = ["publish_will"]
