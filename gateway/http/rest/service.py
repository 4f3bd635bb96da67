"""What every REST handler shares: the engine, the config, and destination look-ups.

``/queues/{name}`` is the anycast queue ``name`` (STOMP ``/queue/name``); ``/topics/{name}``
is the multicast address ``name`` (STOMP ``/topic/name``).  A name that does not exist yet
is served when the address settings let it be auto-created (as a STOMP SEND or SUBSCRIBE
would create it); it is then created lazily, by the first POST or consumer, never by a GET.
Otherwise, and when the name is taken by the other kind (or by a topic's subscription queue),
the answer is 404.  A name REST does not serve (see :mod:`.names`) is 400; ``node::queue``
is served to producers only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from waystation.core.engine import Engine
from waystation.core.queue import ANYCAST, MULTICAST
from waystation.core.security import SYSTEM, Principal
from waystation.core.session import Session
from waystation.gateway.http.rest import auth, sessions
from waystation.gateway.http.rest.errors import fail
from waystation.gateway.http.rest.links import QUEUES, Links, Paths, kind_of
from waystation.gateway.http.rest.names import check_name, is_remote
from waystation.gateway.http.rest.sessions import RequestSessions

if TYPE_CHECKING:
    from waystation.config.listeners import RestConfig


@dataclass(slots=True)
class RestService:
    engine: Engine
    cfg: RestConfig
    data_dir: Path | None
    requests: RequestSessions = field(init=False)
    _node: Session | None = None  # the node's own session, for look-ups only

    def __post_init__(self) -> None:
        self.requests = RequestSessions(self.engine)

    def session(self, who: Principal, remote: str) -> Session:
        """``who``'s request session (see :mod:`.sessions`); ``remote``: where it came from."""
        return self.requests.get(who, remote)

    async def session_of(self, request: web.Request) -> Session:
        """The request session of whoever sent ``request`` (401 on bad credentials)."""
        return self.session(await auth.who(request, self.engine), auth.source_of(request))

    @property
    def node(self) -> Session:
        """A session of the node itself, to look up what exists (never to act for a user)."""
        if self._node is None or self._node.closed:
            self._node = sessions.open_session(self.engine, SYSTEM, "node")
        return self._node

    def close(self) -> None:
        self.requests.close_all()
        if self._node is not None:
            self._node.close()

    def links(self, request: web.Request) -> Links:
        return Links(request, self.cfg.use_link_headers)

    def destination(self, request: web.Request, *, send: bool = False) -> Paths:
        """The queue or topic named in the URL, or 404 (see the module doc).  ``send``: a
        send or its discovery, which may name ``node::queue`` (stored here, forwarded by the
        bridge to that node, as a STOMP SEND does); anything else naming one is a 400."""
        kind = kind_of(request)
        name = check_name(request.match_info["name"], "destination", remote=send)
        if is_remote(name):
            if kind != QUEUES:
                raise fail(
                    web.HTTPBadRequest,
                    f"{name!r} names another node: store-and-forward goes through "
                    f"/queues/{name}/create (the remote node routes it as its own address)",
                )
            return Paths(kind, name)
        if kind == QUEUES:
            self.check_queue(name)
        else:
            self.check_topic(name)
        return Paths(kind, name)

    def check_queue(self, name: str) -> None:
        node = self.node
        q = node.lookup_queue(name)
        if q is not None:
            if q.routing == MULTICAST:  # a push registration's, a STOMP durable subscription
                raise fail(
                    web.HTTPNotFound,
                    f"{name!r} is a subscription of topic {q.address!r}, not a queue",
                )
            return
        if node.lookup_address(name) == MULTICAST:
            raise fail(web.HTTPNotFound, f"{name!r} is a topic, not a queue: use /topics/{name}")
        if not node.may_auto_create(name, ANYCAST):
            raise fail(web.HTTPNotFound, f"queue {name!r} does not exist")

    def check_topic(self, name: str) -> None:
        node = self.node
        routing = node.lookup_address(name)
        if routing == ANYCAST or (routing is None and node.lookup_queue(name) is not None):
            raise fail(web.HTTPNotFound, f"{name!r} is a queue, not a topic: use /queues/{name}")
        if routing is None and not node.may_auto_create(name, MULTICAST):
            raise fail(web.HTTPNotFound, f"topic {name!r} does not exist")


SERVICE = web.AppKey("rest_service", RestService)

__all__ = ["SERVICE", "RestService"]
