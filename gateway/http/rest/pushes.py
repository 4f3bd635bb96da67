"""Push registration resources.

- ``POST /queues/{q}/push-consumers`` (``push-registration``) or
  ``POST /topics/{t}/push-subscriptions`` (``push-topic-registration``), XML body: 201 with
  ``Location``.  Needs consume on the destination (and, for a topic, create_durable_queue or
  create_non_durable_queue for its subscription).  A target outside ``push_allow`` (see
  :mod:`.pushguard`) -> 400; more than ``max_consumers_per_user`` / ``_per_address``
  registrations -> 503 naming the limit.  A bad document -> 400 saying why; a durable
  one that cannot be stored -> 507, and nothing was started.
- Re-registering: a POST whose root carries the ``id`` of a registration of the same
  destination (the document ``GET`` returns, corrected as needed) replaces it and enables it
  again (200, same ``Location``).  A masked password (``********``, as ``GET`` shows it) keeps
  the stored one.  This is the way back for a registration disabled by ``disableOnFailure``
  or by its subscription being deleted; a disabled durable topic registration keeps its
  subscription queue (and everything published meanwhile) until it is re-registered or
  deleted.
- ``GET`` the ``Location``: the registration as XML (password masked), ``enabled`` included.
- ``DELETE`` it: 204; pushing stops, the file goes, a topic registration's subscription is
  deleted.

Durable registrations are stored by :mod:`.pushstore` under ``node.data_dir /
push_store_dir`` and come back at start; a file that cannot be used is logged and skipped.  A
topic registration's subscription is then a durable subscription named by ``<destination>``,
so messages published while the node was down are pushed after.  Without persistence, durable
registrations live in memory only.

Each registration has its own core session acting for the user who registered it (recorded
in its file as ``owner``, so a restored one acts for the same user with that user's current
roles; see :mod:`.sessions`): what it may consume, and the subscription it makes, are checked
there.
"""

from __future__ import annotations

import logging
import uuid

import aiohttp
from aiohttp import web

from waystation.core.filter import compile_filter
from waystation.core.security import SYSTEM, Permission, Principal
from waystation.core.session import Session
from waystation.gateway.http.rest import auth
from waystation.gateway.http.rest.errors import fail, guarded
from waystation.gateway.http.rest.links import TOPICS, Paths, kind_of
from waystation.gateway.http.rest.mapping import read_body
from waystation.gateway.http.rest.pull import Owners
from waystation.gateway.http.rest.push import Pusher
from waystation.gateway.http.rest.pushguard import PushGuard, TargetRefused
from waystation.gateway.http.rest.pushstore import PushStore, problem
from waystation.gateway.http.rest.registration import Registration, RegistrationError, parse
from waystation.gateway.http.rest.service import SERVICE, RestService
from waystation.gateway.http.rest.xmldoc import MAX_XML, parse_xml

log = logging.getLogger("waystation.rest.push")
MASKED = "********"  # what GET shows instead of a password


class PushManager:
    def __init__(self, svc: RestService) -> None:
        self.svc = svc
        cfg = svc.cfg
        self.store = PushStore(svc.data_dir / cfg.push_store_dir if svc.data_dir else None)
        self.pushers: dict[str, Pusher] = {}
        self.session: aiohttp.ClientSession | None = None
        self.guard = PushGuard(cfg.push_allow)
        self.owners = Owners(cfg.max_consumers_per_user, cfg.max_consumers_per_address)
        self.owner_of: dict[str, tuple[str, str]] = {}  # registration id -> (user, host)

    def client(self) -> aiohttp.ClientSession:
        if self.session is None:
            connector = aiohttp.TCPConnector(resolver=self.guard.resolver())
            self.session = aiohttp.ClientSession(connector=connector)
        return self.session

    def release(self, rid: str) -> None:
        owner = self.owner_of.pop(rid, None)
        if owner is not None:
            self.owners.give_back(owner)

    def pusher(self, reg: Registration, who: Principal | None, remote: str = "push") -> Pusher:
        """A pusher acting for ``who`` (None: its user is gone, it cannot start)."""
        return Pusher(
            reg,
            self.svc.engine,
            self.client,
            self.svc.cfg.push_timeout.total_seconds(),
            self.store.save_later,  # disabled: saved with enabled=false
            self.guard,
            who,
            remote,
        )

    def owner_of_file(self, reg: Registration) -> Principal | None:
        """Whom a registration read from disk acts for (see :mod:`.sessions`): its recorded
        user with their current roles; SYSTEM for a file from before users were recorded."""
        if reg.owner is None:
            return SYSTEM
        return self.svc.engine.principal_named(reg.owner)

    async def retire(self, old: Pusher, new: Registration) -> None:
        """Stop ``old`` for ``new`` (the same id): a durable topic subscription stays for it
        unless ``new`` is not durable."""
        dropped = old.reg.durable and not new.durable
        await old.stop(delete_subscription=old.reg.kind == TOPICS and dropped)
        if dropped:
            await self.store.forget(old.reg)

    async def start(self) -> None:
        for path, got in await self.store.load():
            if isinstance(got, Exception):
                log.error("push store: %s skipped: %s", path, problem(got))
                continue
            p = self.pusher(got, self.owner_of_file(got))
            try:
                p.start()
            except Exception as e:
                log.error("push store: %s skipped: %s", path, problem(e))
                continue
            self.pushers[got.id] = p
            log.info("push registration %s restored (%s -> %s)", got.id, got.address, got.href)

    async def stop(self) -> None:
        for p in list(self.pushers.values()):
            await p.stop()
        await self.store.drain()
        if self.session is not None:
            await self.session.close()
            self.session = None


PUSH = web.AppKey("rest_push_manager", PushManager)


# -- handlers --------------------------------------------------------------------------------
@guarded
async def register(request: web.Request) -> web.StreamResponse:
    svc = request.app[SERVICE]
    mgr = request.app[PUSH]
    engine = svc.engine
    paths = svc.destination(request)
    who = await auth.who(request, engine)
    session = svc.session(who, auth.source_of(request))
    auth.check(session, Permission.CONSUME, paths.name)
    root = parse_xml(await read_body(request, MAX_XML), "push registration")
    old = mgr.pushers.get((root.get("id") or "").strip())
    if old is not None and (old.reg.kind != paths.kind or old.reg.address != paths.name):
        old = None  # another destination's: this is a new registration
    try:
        reg = parse(root, rid=old.reg.id if old else uuid.uuid4().hex, kind=paths.kind,
                    name=paths.name)  # fmt: skip
    except RegistrationError as e:
        raise fail(web.HTTPBadRequest, f"invalid push registration: {e}") from None
    reg.enabled = True
    reg.owner = who.name
    if old is not None and reg.password == MASKED and reg.username == old.reg.username:
        reg.password = old.reg.password
    _check_rights(session, paths, reg)
    if old is None and len(mgr.pushers) >= svc.cfg.max_consumers:
        raise fail(
            web.HTTPServiceUnavailable,
            f"too many push registrations (max_consumers = {svc.cfg.max_consumers})",
        )
    owner = (who.name if engine.secured else "", auth.source_of(request))
    if old is None:
        why = mgr.owners.refusal(*owner, "push registrations")
        if why is not None:
            raise fail(web.HTTPServiceUnavailable, why, {"Retry-After": "5"})
    try:
        await mgr.guard.check_url(reg.target("0"))
    except (TargetRefused, ValueError) as e:
        raise fail(web.HTTPBadRequest, f"invalid push registration: {e}") from None
    compile_filter(reg.selector)  # a bad selector is 400 before anything is stored
    try:
        await mgr.store.save(reg)  # first: a registration that cannot be kept never starts
    except OSError as e:
        raise fail(
            web.HTTPInsufficientStorage, f"registration not stored: {e.strerror or 'storage error'}"
        ) from None
    if old is not None:
        await mgr.retire(old, reg)
    p = mgr.pusher(reg, who, auth.source_of(request))
    try:
        p.start()
    except Exception:
        if old is None:
            await mgr.store.forget(reg)
        else:  # the old one is gone: keep this one, disabled, for another try or a DELETE
            reg.enabled = False
            mgr.pushers[reg.id] = p
            mgr.store.save_later(reg)
        raise
    mgr.pushers[reg.id] = p
    if old is None:
        mgr.owner_of[reg.id] = owner
        mgr.owners.take(owner)
    location = svc.links(request).url(paths.registration(reg.id))
    return web.Response(status=200 if old else 201, headers={"Location": location})


def _check_rights(session: Session, paths: Paths, reg: Registration) -> None:
    """403 before anything is stored; the pusher's own session checks again as it starts."""
    if paths.kind == TOPICS:
        durable = Permission.CREATE_DURABLE_QUEUE
        auth.check(session, durable if reg.durable else Permission.CREATE_NON_DURABLE_QUEUE,
                   paths.name)  # fmt: skip
    elif session.lookup_queue(paths.name) is None:
        auth.check(session, Permission.CREATE_DURABLE_QUEUE, paths.name)


async def _find(request: web.Request) -> Pusher:
    svc = request.app[SERVICE]
    mgr = request.app[PUSH]
    who = await auth.who(request, svc.engine)
    kind = kind_of(request)
    name = request.match_info["name"]
    p = mgr.pushers.get(request.match_info["rid"])
    own = p.session if p is not None else None  # the registering user's: usable at the limit
    session = own if own is not None and own.principal == who else None
    auth.check(session or svc.session(who, auth.source_of(request)), Permission.CONSUME, name)
    if p is None or p.reg.kind != kind or p.reg.address != name:
        raise fail(
            web.HTTPNotFound, f"no push registration {request.match_info['rid']!r} on {name!r}"
        )
    return p


@guarded
async def describe(request: web.Request) -> web.StreamResponse:
    p = await _find(request)
    return web.Response(
        status=200, body=p.reg.to_xml(with_password=False), content_type="application/xml"
    )


@guarded
async def unregister(request: web.Request) -> web.StreamResponse:
    p = await _find(request)
    mgr = request.app[PUSH]
    mgr.pushers.pop(p.reg.id, None)
    mgr.release(p.reg.id)
    await p.stop(delete_subscription=p.reg.kind == TOPICS)
    await mgr.store.forget(p.reg)
    return web.Response(status=204)


def setup_routes(app: web.Application) -> None:
    for kind, factory in (("queues", "push-consumers"), ("topics", "push-subscriptions")):
        base = f"/{kind}/{{name}}/{factory}"
        app.router.add_post(base, register)
        app.router.add_get(base + "/{rid}", describe)
        app.router.add_delete(base + "/{rid}", unregister)


__all__ = ["PUSH", "PushManager", "setup_routes"]
