"""What every REST handler shares: the engine, the config, and destination look-ups.

``/queues/{name}`` is the anycast queue ``name`` (STOMP ``/queue/name``); ``/topics/{name}``
is the multicast address ``name`` (STOMP ``/topic/name``).  A name that does not exist yet
is served when the address settings let it be auto-created (as a STOMP SEND or SUBSCRIBE
would create it); it is then created lazily, by the first POST or consumer, never by a GET.
Otherwise, and when the name is taken by the other kind (or by a topic's subscription queue),
the answer is 404.  A name REST does not serve (see :mod:`.names`) is 400.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from waystation.core.engine import Engine
from waystation.core.queue import ANYCAST, MULTICAST
from waystation.gateway.http.rest.errors import fail
from waystation.gateway.http.rest.links import QUEUES, Links, Paths, kind_of
from waystation.gateway.http.rest.names import check_name

if TYPE_CHECKING:
    from waystation.config.listeners import RestConfig


@dataclass(slots=True)
class RestService:
    engine: Engine
    cfg: RestConfig
    data_dir: Path | None

    def links(self, request: web.Request) -> Links:
        return Links(request, self.cfg.use_link_headers)

    def destination(self, request: web.Request) -> Paths:
        """The queue or topic named in the URL, or 404 (see the module doc)."""
        kind = kind_of(request)
        name = check_name(request.match_info["name"], "destination")
        if kind == QUEUES:
            self.check_queue(name)
        else:
            self.check_topic(name)
        return Paths(kind, name)

    def check_queue(self, name: str) -> None:
        engine = self.engine
        q = engine.queue(name)
        if q is not None:
            if q.routing == MULTICAST:  # a push registration's, a STOMP durable subscription
                raise fail(
                    web.HTTPNotFound,
                    f"{name!r} is a subscription of topic {q.address!r}, not a queue",
                )
            return
        info = engine.post.addresses.get(name)
        if info is not None and info.routing == MULTICAST:
            raise fail(web.HTTPNotFound, f"{name!r} is a topic, not a queue: use /topics/{name}")
        if not engine.settings.resolve(name).auto_create_queues:
            raise fail(web.HTTPNotFound, f"queue {name!r} does not exist")

    def check_topic(self, name: str) -> None:
        engine = self.engine
        info = engine.post.addresses.get(name)
        if (info is not None and info.routing == ANYCAST) or (
            info is None and engine.queue(name) is not None
        ):
            raise fail(web.HTTPNotFound, f"{name!r} is a queue, not a topic: use /queues/{name}")
        if info is None and not engine.settings.resolve(name).auto_create_addresses:
            raise fail(web.HTTPNotFound, f"topic {name!r} does not exist")


SERVICE = web.AppKey("rest_service", RestService)

__all__ = ["SERVICE", "RestService"]
