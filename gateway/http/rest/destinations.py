"""``/queues/{name}`` and ``/topics/{name}`` (discovery) and ``POST /queues`` / ``/topics``.

``HEAD``/``GET`` answer 200 with the destination's links (``GET`` also with a small XML body
listing them); the caller needs send, consume or browse on it.  A ``node::queue`` has the
create links only (it can be sent to, not consumed from), and needs send.

``POST /queues`` with ``<queue name="x"><durable>true</durable><selector>..</selector></queue>``
creates the anycast queue ``x`` (create_durable_queue or create_non_durable_queue);
``POST /topics`` with ``<topic name="x"/>`` declares the multicast address ``x``
(create_non_durable_queue, what a STOMP subscriber needs to make one appear).  201 with
``Location``; a destination that already exists as asked answers 200 with ``Location`` (so a
client can run the same set-up at every start); a name taken by the other kind answers 409.
A topic has no state of its own to persist: after a restart it exists again as soon as it is
used (auto-create) or declared in the config.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from xml.sax.saxutils import quoteattr

from aiohttp import web

from waystation.core.queue import ANYCAST, MULTICAST
from waystation.core.security import Permission
from waystation.gateway.http.rest import auth
from waystation.gateway.http.rest.errors import fail, guarded
from waystation.gateway.http.rest.links import QUEUES, TOPICS, Paths, destination_links
from waystation.gateway.http.rest.mapping import read_body
from waystation.gateway.http.rest.names import check_name, is_remote
from waystation.gateway.http.rest.service import SERVICE
from waystation.gateway.http.rest.xmldoc import MAX_XML, parse_xml, xml_bool, xml_text


@guarded
async def head_destination(request: web.Request) -> web.StreamResponse:
    svc = request.app[SERVICE]
    paths = svc.destination(request, send=True)
    session = await svc.session_of(request)
    if is_remote(paths.name):  # node::queue: only sending is served
        auth.check(session, Permission.SEND, paths.name)
        links = destination_links(svc.links(request), paths, consumers=False)
    else:
        perms = (Permission.SEND, Permission.CONSUME, Permission.BROWSE)
        auth.check_any(session, perms, paths.name)
        links = destination_links(svc.links(request), paths)
    headers = links.headers()
    if request.method == "HEAD":
        return web.Response(status=200, headers=headers)
    tag = "queue" if paths.kind == QUEUES else "topic"
    rows = "".join(
        f"<link rel={quoteattr(rel)} href={quoteattr(url)}/>" for rel, url in links.items
    )
    body = f"<{tag} name={quoteattr(paths.name)}>{rows}</{tag}>"
    return web.Response(status=200, text=body, content_type="application/xml", headers=headers)


@guarded
async def create_queue(request: web.Request) -> web.StreamResponse:
    svc = request.app[SERVICE]
    session = await svc.session_of(request)
    root = parse_xml(await read_body(request, MAX_XML), "queue")
    name = _name(root, "queue")
    durable = xml_bool(root, "durable", True)
    selector = xml_text(root, "selector")
    perm = Permission.CREATE_DURABLE_QUEUE if durable else Permission.CREATE_NON_DURABLE_QUEUE
    auth.check(session, perm, name)
    location = svc.links(request).url(Paths(QUEUES, name).root)
    q = session.lookup_queue(name)
    if q is not None and q.routing == MULTICAST:
        raise fail(web.HTTPConflict, f"{name!r} is a subscription of topic {q.address!r}")
    if q is not None:
        return web.Response(status=200, headers={"Location": location})
    if session.lookup_address(name) == MULTICAST:
        raise fail(web.HTTPConflict, f"{name!r} is already a topic")
    session.create_queue(name, durable=durable, selector=selector)
    if durable:
        await session.flush()
    return web.Response(status=201, headers={"Location": location})


@guarded
async def create_topic(request: web.Request) -> web.StreamResponse:
    svc = request.app[SERVICE]
    session = await svc.session_of(request)
    root = parse_xml(await read_body(request, MAX_XML), "topic")
    name = _name(root, "topic")
    auth.check(session, Permission.CREATE_NON_DURABLE_QUEUE, name)
    location = svc.links(request).url(Paths(TOPICS, name).root)
    routing = session.lookup_address(name)
    if routing == ANYCAST or session.lookup_queue(name) is not None:
        raise fail(web.HTTPConflict, f"{name!r} is already a queue")
    if routing is not None:
        return web.Response(status=200, headers={"Location": location})
    session.declare_address(name)
    return web.Response(status=201, headers={"Location": location})


def _name(root: ET.Element, tag: str) -> str:
    if root.tag != tag:
        raise fail(web.HTTPBadRequest, f"expected a <{tag}> document, got <{root.tag}>")
    name = (root.get("name") or "").strip()
    if not name:
        raise fail(web.HTTPBadRequest, f'<{tag}> needs a name attribute: <{tag} name="...">')
    return check_name(name, tag)


def setup_routes(app: web.Application) -> None:
    app.router.add_post("/queues", create_queue)
    app.router.add_post("/topics", create_topic)
    app.router.add_get("/queues/{name}", head_destination)
    app.router.add_get("/topics/{name}", head_destination)


__all__ = ["setup_routes"]
