"""When a shared subscription's queue goes: its last member left and nobody will come back.

``$share/<group>/<filter>`` is one durable queue for the group.  A member whose session
outlives its connection (v5 session expiry, 3.1.1 clean session 0) keeps it: messages queue
for the group while every member is away.  When a member of a session that ends leaves
(UNSUBSCRIBE, or its connection or session ends) and the queue then has no consumer and no
saved session lists the filter, the queue is deleted with what it held, like a
non-persistent subscription's.  The saved sessions are read only in that case (the last
member leaving), not per message.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from waystation.core.security import NotAuthorized
from waystation.core.session import SessionError

if TYPE_CHECKING:
    from waystation.core.session import Session

log = logging.getLogger("waystation.mqtt")
SCOPE = "mqtt/"


def held_elsewhere(session: Session, topic_filter: str, own_scope: str) -> bool:
    """Whether a saved MQTT session other than ``own_scope`` subscribes ``topic_filter``."""
    engine = session.engine
    for scope in engine.client_states.scopes(SCOPE):
        if scope == own_scope:
            continue
        for rec in engine.load_state(scope, "subscriptions") or ():
            if rec and rec[0] == topic_filter:
                return True
    return False


def drop_if_unused(session: Session, topic_filter: str, queue_name: str, own_scope: str) -> bool:
    """Delete the group queue ``queue_name`` if no member holds it; whether it went."""
    q = session.engine.queue(queue_name)
    if q is None or q.deleted or q.consumers:
        return False
    if held_elsewhere(session, topic_filter, own_scope):
        return False
    try:
        session.delete_subscription(queue_name)
    except (NotAuthorized, SessionError) as e:
        log.info("MQTT: shared subscription %r kept: %s", queue_name, e)
        return False
    return True


def scope_of(core_id: str) -> str:
    return SCOPE + core_id


__all__ = ["drop_if_unused", "held_elsewhere", "scope_of"]
