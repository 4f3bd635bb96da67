"""REST on the core session (DESIGN §7): which session does what for a connectionless protocol.

HTTP has no connection to hang a session on, so REST opens them per resource:

- **one session per pull consumer / pull subscription** (``POST .../pull-consumers`` or
  ``.../pull-subscriptions``), its principal the user who created it (or, after a restart,
  the user whose request re-attached a durable subscription REST made).  It is closed when the
  resource is deleted, reaped idle, or the server stops; closing gives an unacknowledged
  message back and drops a temporary subscription queue.
- **one session per push registration**, its principal the registering user.  A registration
  restored from disk acts for the user recorded in its file (``owner``), with that user's
  current roles; when security is on and that user no longer exists the registration is not
  started.  Files written before the owner was recorded run as :data:`~waystation.core.
  security.SYSTEM` (the node acting for a user it checked when the registration was made):
  their subscription queues predate subscriber records, so nothing else is opened to them.
- **one request session per principal** (:class:`RequestSessions`) for everything a single
  request does: sends, discovery, ``POST /queues`` / ``/topics``, and the permission checks of
  a request on a resource another session holds (a DELETE of a durable subscription is checked
  for the requester, then done by the owning session).  At most :data:`MAX_REQUEST_SESSIONS`
  are kept (least recently used closed first; they hold nothing but cached send checks).

Every session counts toward ``[limits] max_sessions_per_user``: a user holds at most
``max_consumers_per_user`` consumer and push sessions plus one request session, so
``max_consumers_per_user`` should stay below ``max_sessions_per_user`` (defaults 500 and 1000).
A session refused by that limit is a 503 naming it.

Permission checks, destination look-ups for 404s and explicit queue, topic and subscription
creation are the session's own (``check``, ``lookup_queue``, ``lookup_address``,
``create_queue``, ``declare_address``, ``Source(owned=False)`` for push subscriptions that are
reachable by name); nothing in the REST package touches the post office, the settings or the
security manager.
"""

from __future__ import annotations

from collections import OrderedDict

from waystation.core.engine import Engine
from waystation.core.security import Principal
from waystation.core.session import Session

PROTOCOL = "rest"
MAX_REQUEST_SESSIONS = 256


def open_session(engine: Engine, who: Principal, remote: str) -> Session:
    """A new REST session (raises LimitExceeded at ``max_sessions_per_user``)."""
    return engine.open_session(who, PROTOCOL, remote)


class RequestSessions:
    """One session per principal for request-scoped work (see the module doc)."""

    def __init__(self, engine: Engine, size: int = MAX_REQUEST_SESSIONS) -> None:
        self.engine = engine
        self.size = size
        self._by: OrderedDict[Principal, Session] = OrderedDict()

    def get(self, who: Principal, remote: str) -> Session:
        s = self._by.get(who)
        if s is not None and not s.closed:
            self._by.move_to_end(who)
            return s
        s = open_session(self.engine, who, remote)
        self._by[who] = s
        while len(self._by) > self.size:
            _, old = self._by.popitem(last=False)
            old.close()
        return s

    def close_all(self) -> None:
        for s in self._by.values():
            s.close()
        self._by.clear()


__all__ = ["MAX_REQUEST_SESSIONS", "PROTOCOL", "RequestSessions", "open_session"]
