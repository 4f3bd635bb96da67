"""Pull consumer and pull subscription resources: creating, finding, describing, deleting.

- ``POST /queues/{q}/pull-consumers`` / ``POST /topics/{t}/pull-subscriptions`` with the form
  (or query) ``autoAck`` (true), ``selector``; for topics also ``durable`` (false), ``name``,
  ``idle-timeout`` (ms, instead of ``consumer_session_timeout``) and ``delete-when-idle``.
  201 with ``Location`` (the consumer), ``msg-consumer`` and ``msg-consume-next`` or
  ``msg-acknowledge-next``.  A durable subscription's consumer id is its name, so its URLs
  survive a restart; posting the same name again while it is live answers 200 like ``GET``,
  and re-creates it (with what it kept) when it is not.  Without ``selector`` the subscription
  keeps its own; a different selector -> 409 (DELETE it first: changing the selector would drop
  what it kept).  Without ``name`` a durable subscription gets a generated one.  A name held by
  any queue REST did not make as a pull subscription of this topic (an ordinary queue, a push
  registration's or a STOMP durable subscription) -> 409; see :mod:`.substore`.
- ``GET``/``HEAD`` the consumer: its current next link (``msg-acknowledgement`` while a
  message awaits its acknowledgement) and ``msg-consumer``.  ``DELETE``: 204; a durable
  subscription is deleted too (delete_durable_queue); an unacknowledged message goes back.
- An unknown consumer (deleted, reaped, or from before a restart) -> 404 with the factory
  link; a durable subscription REST made is re-attached after a restart (see :mod:`pulling`),
  never another durable queue of the topic.

The consume/acknowledge state machine is in :mod:`pulling`.
"""

from __future__ import annotations

import asyncio
import uuid

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from waystation.core.filter import compile_filter
from waystation.core.queue import ANYCAST, MULTICAST
from waystation.core.security import Permission, Principal
from waystation.core.session import Session, Source
from waystation.gateway.admission import REFUSAL_DELAY
from waystation.gateway.http.rest import auth, sessions
from waystation.gateway.http.rest.errors import fail, guarded
from waystation.gateway.http.rest.links import QUEUES, TOPICS, Links, Paths, kind_of
from waystation.gateway.http.rest.mapping import parse_bool, parse_int
from waystation.gateway.http.rest.names import check_name
from waystation.gateway.http.rest.pull import PullConsumer, Registry
from waystation.gateway.http.rest.service import SERVICE, RestService

REGISTRY = web.AppKey("rest_pull_registry", Registry)


# -- helpers --------------------------------------------------------------------------------
def next_links(links: Links, c: PullConsumer, paths: Paths) -> Links:
    base = paths.consumer(c.auto_ack, c.id)
    if c.auto_ack:
        links.add("consume-next", f"{base}/consume-next-{c.next_index}")
    elif c.pending is not None:
        links.add("acknowledgement", f"{base}/acknowledgement/{c.pending[0]}")
    else:
        links.add("acknowledge-next", f"{base}/acknowledge-next-{c.next_index}")
    links.add("consumer", base)
    return links


async def params(request: web.Request) -> dict[str, str]:
    out = {k: v for k, v in request.query.items()}
    try:
        form = await request.post()
    except (ValueError, HttpProcessingError) as e:
        raise fail(web.HTTPBadRequest, f"unreadable form: {e}") from None
    for k, v in form.items():
        if isinstance(v, str):
            out[k] = v
    return out


def _paths(request: web.Request) -> Paths:
    return Paths(kind_of(request), request.match_info["name"])


# -- opening ---------------------------------------------------------------------------------
def _open(
    svc: RestService,
    reg: Registry,
    who: Principal,
    paths: Paths,
    cid: str,
    auto_ack: bool,
    *,
    selector: str | None,
    durable_name: str | None = None,
    timeout: float | None = None,
    delete_when_idle: bool = False,
    host: str = "?",
) -> PullConsumer:
    engine = svc.engine
    if reg.stopping:
        raise fail(web.HTTPServiceUnavailable, "the server is stopping")
    if len(reg) >= svc.cfg.max_consumers:
        raise fail(
            web.HTTPServiceUnavailable,
            f"too many REST consumers (max_consumers = {svc.cfg.max_consumers})",
            {"Retry-After": "5"},
        )
    user = who.name if engine.secured else ""
    why = reg.owners.refusal(user, host, "REST consumers")
    if why is not None:
        raise fail(web.HTTPServiceUnavailable, why, {"Retry-After": "5"})
    idle = svc.cfg.consumer_session_timeout.total_seconds() if timeout is None else timeout
    c = PullConsumer(
        cid,
        paths.kind,
        paths.name,
        auto_ack,
        timeout=idle,
        durable_name=durable_name,
        delete_when_idle=delete_when_idle,
    )
    c.owner = (user, host)
    source = Source(
        paths.name,
        ANYCAST if paths.kind == QUEUES else MULTICAST,
        selector=selector,
        durable_name=durable_name,
    )
    session = sessions.open_session(engine, who, host)  # the consumer's own (see .sessions)
    try:  # every permission (consume, create the queue or subscription) is checked here
        consumer = session.subscribe(source, c, window=1, name=f"rest-{cid}")
    except BaseException:
        session.close()
        raise
    c.attach(session, consumer)
    reg.add(c)
    return c


def durable_queue_of(svc: RestService, topic: str, qname: str) -> bool:
    q = svc.node.lookup_queue(qname)
    return q is not None and q.durable and q.routing == MULTICAST and q.address == topic


def _ours(svc: RestService, reg: Registry, topic: str, qname: str) -> bool:
    """A durable pull subscription REST made on ``topic`` (and only then may attach)."""
    return reg.subscriptions.owns(qname, topic) and durable_queue_of(svc, topic, qname)


def checker(svc: RestService, who: Principal, host: str, c: PullConsumer | None) -> Session:
    """The session that checks ``who``'s request on ``c``: the consumer's own when ``who``
    made it (a user at ``max_sessions_per_user`` can still use and delete what they hold),
    else ``who``'s request session."""
    if c is not None and c.session is not None and c.session.principal == who:
        return c.session
    return svc.session(who, host)


async def lookup(request: web.Request, auto_ack: bool | None) -> tuple[PullConsumer, Paths, bool]:
    """The consumer in the URL -> (consumer, paths, re-attached after a restart)."""
    svc = request.app[SERVICE]
    reg = request.app[REGISTRY]
    who = await auth.who(request, svc.engine)
    paths = _paths(request)
    cid = request.match_info["cid"]
    if auto_ack is None:
        auto_ack = request.match_info["mode"] == "auto-ack"
    c = reg.get(cid)
    auth.check(checker(svc, who, auth.source_of(request), c), Permission.CONSUME, paths.name)
    if c is not None and c.kind == paths.kind and c.destination == paths.name:
        if c.auto_ack == auto_ack:
            return c, paths, False
    elif c is None and paths.kind == TOPICS and _ours(svc, reg, paths.name, cid):
        q = svc.node.lookup_queue(cid)
        assert q is not None
        c = _open(svc, reg, who, paths, cid, auto_ack, selector=q.selector, durable_name=cid,
                  host=auth.source_of(request))  # fmt: skip
        return c, paths, True
    links = svc.links(request)
    factory = "pull-consumers" if paths.kind == QUEUES else "pull-subscriptions"
    links.add(factory, paths.pull)
    raise fail(
        web.HTTPNotFound,
        f"no such consumer {cid!r} (deleted, timed out or from before a restart): "
        f"create one at {links.url(paths.pull)}",
        links.headers(),
    )


# -- handlers --------------------------------------------------------------------------------
@guarded
async def create(request: web.Request) -> web.StreamResponse:
    svc = request.app[SERVICE]
    reg = request.app[REGISTRY]
    paths = svc.destination(request)
    who = await auth.who(request, svc.engine)
    p = await params(request)
    auto_ack = parse_bool("autoAck", p.get("autoAck"), True)
    selector = p.get("selector") or None
    durable_name: str | None = None
    timeout: float | None = None
    delete_when_idle = False
    if paths.kind == TOPICS:
        if parse_bool("durable", p.get("durable"), False):
            durable_name = p.get("name") or f"{paths.name}.rest-{uuid.uuid4().hex[:12]}"
            check_name(durable_name, "subscription")
        idle_ms = parse_int("idle-timeout", p.get("idle-timeout"), 1)
        timeout = idle_ms / 1000 if idle_ms is not None else None
        delete_when_idle = parse_bool("delete-when-idle", p.get("delete-when-idle"), False)
    user = who.name if svc.engine.secured else ""
    if reg.owners.refusal(user, auth.source_of(request), "") is not None:
        await asyncio.sleep(REFUSAL_DELAY)  # held a moment: a flooding loop is slowed
    status = 201
    if durable_name is not None:
        status, c = await _durable(
            svc, reg, who, paths, durable_name, auto_ack, selector,
            timeout=timeout, delete_when_idle=delete_when_idle, host=auth.source_of(request),
        )  # fmt: skip
    else:
        cid = uuid.uuid4().hex
        c = _open(svc, reg, who, paths, cid, auto_ack, selector=selector, timeout=timeout,
                  host=auth.source_of(request))  # fmt: skip
    links = next_links(svc.links(request), c, paths)
    headers = links.headers()
    headers["Location"] = links.url(paths.consumer(c.auto_ack, c.id))
    return web.Response(status=status, headers=headers)


async def _durable(
    svc: RestService,
    reg: Registry,
    who: Principal,
    paths: Paths,
    name: str,
    auto_ack: bool,
    selector: str | None,
    *,
    timeout: float | None,
    delete_when_idle: bool,
    host: str,
) -> tuple[int, PullConsumer]:
    """Create, re-create or find the durable subscription ``name`` -> (status, consumer)."""
    live = reg.get(name)
    q = svc.node.lookup_queue(name)
    if (live is not None and (live.destination != paths.name or live.durable_name != name)) or (
        q is not None and not _ours(svc, reg, paths.name, name)
    ):
        raise fail(web.HTTPConflict, f"name {name!r} is taken by another queue or subscription")
    if q is not None:
        kept = q.selector
        if selector is None:
            selector = kept  # re-created by name: the same subscription, not a new one
        else:
            asked = compile_filter(selector)
            if (asked.text if asked is not None else None) != kept:
                raise fail(
                    web.HTTPConflict,
                    f"subscription {name!r} exists with selector {kept!r}, not {selector!r}: "
                    "DELETE it first to change its selector (its messages go with it)",
                )
    if live is not None:
        auth.check(checker(svc, who, host, live), Permission.CONSUME, paths.name)
        live.touch()
        return 200, live
    c = _open(svc, reg, who, paths, name, auto_ack, selector=selector, durable_name=name,
              timeout=timeout, delete_when_idle=delete_when_idle, host=host)  # fmt: skip
    try:
        await reg.subscriptions.add(name, paths.name)
    except OSError as e:
        reg.remove(c, delete_durable=q is None)  # a queue made just now goes again
        raise fail(
            web.HTTPInsufficientStorage, f"subscription not stored: {e.strerror or 'storage error'}"
        ) from None
    return 201, c


@guarded
async def describe(request: web.Request) -> web.StreamResponse:
    svc = request.app[SERVICE]
    c, paths, _ = await lookup(request, None)
    c.touch()
    return web.Response(status=200, headers=next_links(svc.links(request), c, paths).headers())


@guarded
async def delete(request: web.Request) -> web.StreamResponse:
    svc = request.app[SERVICE]
    c, paths, _ = await lookup(request, None)
    if c.durable_name is not None:  # checked for the requester; the owner's session deletes
        who = await auth.who(request, svc.engine)
        session = checker(svc, who, auth.source_of(request), c)
        auth.check(session, Permission.DELETE_DURABLE_QUEUE, paths.name)
    request.app[REGISTRY].remove(c, delete_durable=c.durable_name is not None)
    return web.Response(status=204)


def setup_routes(app: web.Application) -> None:
    r = app.router
    for kind, factory in (("queues", "pull-consumers"), ("topics", "pull-subscriptions")):
        base = f"/{kind}/{{name}}/{factory}"
        r.add_post(base, create)
        r.add_get(base + "/{mode:auto-ack|acknowledged}/{cid}", describe)
        r.add_delete(base + "/{mode:auto-ack|acknowledged}/{cid}", delete)


__all__ = ["REGISTRY", "durable_queue_of", "lookup", "next_links", "params", "setup_routes"]
