"""Links: absolute URLs built from the request, sent as ``msg-*`` headers or one ``Link``.

Clients treat every URL but ``/queues/{name}`` and ``/topics/{name}`` as opaque and follow
links, so the URL shapes here are free to change.  With ``use_link_headers`` the links go in
one RFC 8288 ``Link`` header whose ``rel`` (and ``title``) is the name without ``msg-``
(``rel="create"``), as HornetQ's link-header strategy does; otherwise each is a header
``msg-{rel}: URL``.  The scheme and host come from ``X-Forwarded-Proto`` / ``X-Forwarded-Host``
when a proxy set them, else from the request itself.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from aiohttp import web

QUEUES = "queues"
TOPICS = "topics"
_HOST = re.compile(r"^[A-Za-z0-9.\-_:\[\]]+$")


def base_url(request: web.Request) -> str:
    """``scheme://host`` as the client sees this server."""
    h = request.headers
    proto = h.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
    if proto not in ("http", "https"):
        proto = request.scheme
    host = h.get("X-Forwarded-Host", "").split(",")[0].strip()
    if not host or not _HOST.match(host):
        host = request.host if _HOST.match(request.host or "") else "localhost"
    return f"{proto}://{host}"


def kind_of(request: web.Request) -> str:
    """QUEUES or TOPICS: which kind of destination the request's URL is under."""
    return QUEUES if request.path.startswith("/queues/") else TOPICS


def seg(name: str) -> str:
    """One path segment (a queue, topic, consumer or registration name)."""
    return quote(name, safe="-._~!$&'()*+,;=:@")


class Paths:
    """Every URL of one destination, relative to the server root."""

    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind
        self.name = name
        self.root = f"/{kind}/{seg(name)}"

    @property
    def create(self) -> str:
        return f"{self.root}/create"

    def create_id(self, dup_id: str) -> str:
        return f"{self.root}/create/{seg(dup_id)}"

    @property
    def pull(self) -> str:
        return f"{self.root}/{'pull-consumers' if self.kind == QUEUES else 'pull-subscriptions'}"

    @property
    def push(self) -> str:
        return f"{self.root}/{'push-consumers' if self.kind == QUEUES else 'push-subscriptions'}"

    def consumer(self, auto_ack: bool, cid: str) -> str:
        return f"{self.pull}/{'auto-ack' if auto_ack else 'acknowledged'}/{seg(cid)}"

    def registration(self, rid: str) -> str:
        return f"{self.push}/{seg(rid)}"


class Links:
    """Collects links for one response and writes them in the configured style."""

    def __init__(self, request: web.Request, link_header: bool) -> None:
        self.base = base_url(request)
        self.link_header = link_header
        self.items: list[tuple[str, str]] = []

    def url(self, path: str) -> str:
        return self.base + path

    def add(self, rel: str, path: str) -> Links:
        self.items.append((rel, self.url(path)))
        return self

    def headers(self) -> dict[str, str]:
        if self.link_header and self.items:
            return {"Link": ", ".join(f'<{u}>; rel="{r}"; title="{r}"' for r, u in self.items)}
        return {f"msg-{rel}": u for rel, u in self.items}


def destination_links(links: Links, paths: Paths, *, consumers: bool = True) -> Links:
    """The links ``HEAD``/``GET`` on a queue or topic returns (``consumers=False``: the
    create links only, for a ``node::queue`` that can only be sent to)."""
    links.add("create", paths.create)
    links.add("create-with-id", paths.root + "/create/{id}")
    if not consumers:
        return links
    kind = "consumers" if paths.kind == QUEUES else "subscriptions"
    links.add(f"pull-{kind}", paths.pull)
    links.add(f"push-{kind}", paths.push)
    return links


__all__ = ["QUEUES", "TOPICS", "Links", "Paths", "base_url", "destination_links", "kind_of", "seg"]
