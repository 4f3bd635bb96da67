"""Posting messages: ``POST .../create`` and duplicate-safe ``POST .../create/{id}``.

- ``POST msg-create``: with ``dups_ok`` (the default) the message is sent and the answer is
  201 with ``msg-create-next`` = the same create URL.  With ``dups_ok = false`` the answer is
  307 to a fresh ``.../create/{id}`` and the client re-POSTs the body there.
- ``POST .../create/{id}`` (a 307 ``Location``, a ``msg-create-next`` or the client's own id in
  ``msg-create-with-id``): ``id`` becomes the message's duplicate id (``_WS_DUPL_ID``), so the
  engine's duplicate cache drops a repeat; every answer, the repeat's too, is 201 with the
  same ``msg-create-next`` (``.../create/{next}``, ``next`` derived from ``id``).
- Query parameters: ``durable`` (default ``default_durable_send``), ``ttl`` (ms),
  ``expiration`` (absolute, ms since the epoch; wins over ``ttl``), ``priority`` (0-9).
  Without either, ``producer_time_to_live`` applies.  The expiry time must fit the store's
  signed 64-bit milliseconds (400 otherwise).
- ``/queues/site-b::orders/create`` stores the message for the bridge to node ``site-b``
  (as a STOMP SEND to ``site-b::orders``); without a bridge to that node it is
  dead-lettered with reason ``unknown_node``, as over STOMP.
- A durable message is answered only once it is on disk (a repeat: once everything before
  it is).  An address over its size limit with BLOCK holds the answer until there is room;
  with FAIL the answer is 503 naming the address.
"""

from __future__ import annotations

import hashlib
import uuid

from aiohttp import web

from waystation.core.message import DEFAULT_PRIORITY, DUPLICATE_ID, now_ms
from waystation.core.postoffice import InvalidMessage
from waystation.core.queue import ANYCAST, MULTICAST
from waystation.gateway.http.rest.errors import fail, guarded
from waystation.gateway.http.rest.links import QUEUES
from waystation.gateway.http.rest.mapping import (
    fields_from_properties,
    parse_bool,
    parse_int,
    properties_from_request,
    read_body,
)
from waystation.gateway.http.rest.service import SERVICE

MAX_MS = 2**63 - 1  # the store's timestamps are signed 64-bit milliseconds


def next_id(dup_id: str) -> str:
    """The id of the create URL that follows ``dup_id``: deterministic, so the answer to a
    repeated POST names the same next URL, and unrelated to other clients' chains."""
    return hashlib.blake2b(dup_id.encode(), digest_size=16, person=b"ws-rest-next").hexdigest()


@guarded
async def post_message(request: web.Request) -> web.StreamResponse:
    svc = request.app[SERVICE]
    engine = svc.engine
    cfg = svc.cfg
    paths = svc.destination(request, send=True)  # node::queue: store-and-forward
    address = paths.name
    routing = ANYCAST if paths.kind == QUEUES else MULTICAST
    session = await svc.session_of(request)
    session.check_send(address, routing)  # send, and create for a queue not there yet
    dup_id = request.match_info.get("id")
    links = svc.links(request)
    if dup_id is None and not cfg.dups_ok:
        location = links.url(paths.create_id(uuid.uuid4().hex))
        return web.Response(status=307, headers={"Location": location})
    if dup_id is not None and not dup_id.strip():
        raise fail(web.HTTPBadRequest, "empty message id in the create URL")
    q = request.query
    durable = parse_bool("durable", q.get("durable"), cfg.default_durable_send)
    priority = parse_int("priority", q.get("priority"), 0, 9)
    now = now_ms()
    ttl = parse_int("ttl", q.get("ttl"), 0, MAX_MS - now)
    expiration = parse_int("expiration", q.get("expiration"), 0, MAX_MS)
    if expiration is None:
        live = ttl if ttl is not None else int(cfg.producer_time_to_live.total_seconds() * 1000)
        expiration = min(now + live, MAX_MS) if live > 0 else 0
    body = await read_body(request, cfg.max_body_size)
    props = properties_from_request(request.headers.items())
    if dup_id is not None:
        props[DUPLICATE_ID] = dup_id
    msg = engine.make_message(
        address,
        body,
        props,
        durable=durable,
        priority=DEFAULT_PRIORITY if priority is None else priority,
        expiration=expiration,
    )
    fields_from_properties(msg)  # Content-Type: the content_type field
    while (gate := session.blocked(address)) is not None:
        await gate  # BLOCK: hold the answer until the address has room
    try:
        fut = session.send(msg, routing=routing)
    except InvalidMessage as e:  # nothing was routed and the duplicate id is not taken
        raise fail(web.HTTPBadRequest, f"message refused: {e}") from None
    if durable:
        try:
            if fut is not None:
                await fut
            elif dup_id is not None:
                await session.flush()  # a repeat: the first copy may still be on its way
        except Exception as e:
            raise fail(
                web.HTTPServiceUnavailable, f"store failure, message not persisted: {e}"
            ) from None
    nxt = paths.create_id(next_id(dup_id)) if dup_id is not None else paths.create
    links.add("create-next", nxt)
    return web.Response(status=201, headers=links.headers())


def setup_routes(app: web.Application) -> None:
    for kind in ("queues", "topics"):
        app.router.add_post(f"/{kind}/{{name}}/create", post_message)
        app.router.add_post(f"/{kind}/{{name}}/create/{{id}}", post_message)


__all__ = ["next_id", "post_message", "setup_routes"]
