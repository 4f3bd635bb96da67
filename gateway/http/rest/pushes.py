"""Push registration resources and their durable store.

- ``POST /queues/{q}/push-consumers`` (``push-registration``) or
  ``POST /topics/{t}/push-subscriptions`` (``push-topic-registration``), XML body: 201 with
  ``Location``.  Needs consume on the destination (and, for a topic, create_durable_queue or
  create_non_durable_queue for its subscription).  A bad document -> 400 saying why.
- ``GET`` the ``Location``: the registration as XML (password masked), ``enabled`` included.
- ``DELETE`` it: 204; pushing stops, the file goes, a topic registration's subscription is
  deleted.

Durable registrations are stored as XML files ``{id}.xml`` (the same document, with ``id``,
``destination`` and ``topic`` filled in) under ``node.data_dir / push_store_dir`` and come
back at start; hand-written files there load the same way, and a file that cannot be used is
logged and skipped.  A topic registration's subscription is then a durable subscription
named by ``<destination>``, so messages published while the node was down are pushed after.
Without persistence, durable registrations live in memory only.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import uuid
from pathlib import Path

import aiohttp
from aiohttp import web

from core.security import Permission
from gateway.http.rest import auth
from gateway.http.rest.destinations import MAX_XML, parse_xml
from gateway.http.rest.errors import fail, guarded
from gateway.http.rest.links import QUEUES, TOPICS
from gateway.http.rest.mapping import read_body
from gateway.http.rest.push import Pusher
from gateway.http.rest.registration import Registration, RegistrationError, parse
from gateway.http.rest.service import SERVICE, RestService

log = logging.getLogger("waystation.rest.push")
_ID = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")


class PushManager:
    def __init__(self, svc: RestService) -> None:
        self.svc = svc
        cfg = svc.cfg
        self.store: Path | None = svc.data_dir / cfg.push_store_dir if svc.data_dir else None
        self.pushers: dict[str, Pusher] = {}
        self.session: aiohttp.ClientSession | None = None

    def client(self) -> aiohttp.ClientSession:
        if self.session is None:
            self.session = aiohttp.ClientSession()
        return self.session

    def pusher(self, reg: Registration) -> Pusher:
        return Pusher(
            reg,
            self.svc.engine,
            self.client,
            self.svc.cfg.push_timeout.total_seconds(),
            self._disabled,
        )

    def _disabled(self, reg: Registration) -> None:
        if reg.durable:
            asyncio.get_running_loop().create_task(self.save(reg))

    # -- store ---------------------------------------------------------------------------
    async def save(self, reg: Registration) -> None:
        if self.store is None or not reg.durable:
            return
        data = reg.to_xml()
        await asyncio.get_running_loop().run_in_executor(
            None, _write_file, self.store, reg.id, data
        )

    async def forget(self, reg: Registration) -> None:
        if self.store is None or not reg.durable:
            return
        path = self.store / f"{reg.id}.xml"
        await asyncio.get_running_loop().run_in_executor(None, lambda: path.unlink(missing_ok=True))

    async def start(self) -> None:
        if self.store is None:
            return
        loop = asyncio.get_running_loop()
        files = await loop.run_in_executor(None, _read_store, self.store)
        for path, data in files:
            try:
                reg = _from_file(data)
                reg.durable = True
                p = self.pusher(reg)
                p.start()
            except Exception as e:  # one bad file must not stop the others
                text = e.text if isinstance(e, web.HTTPException) else str(e)
                log.error("push store: %s skipped: %s", path, (text or "").strip())
                continue
            self.pushers[reg.id] = p
            log.info("push registration %s restored (%s -> %s)", reg.id, reg.address, reg.href)

    async def stop(self) -> None:
        for p in list(self.pushers.values()):
            await p.stop()
        if self.session is not None:
            await self.session.close()
            self.session = None


def _write_file(store: Path, rid: str, data: bytes) -> None:
    store.mkdir(parents=True, exist_ok=True)
    tmp = store / f".{rid}.xml.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, store / f"{rid}.xml")


def _read_store(store: Path) -> list[tuple[Path, bytes]]:
    if not store.is_dir():
        return []
    return [(p, p.read_bytes()) for p in sorted(store.glob("*.xml"))]


def _from_file(data: bytes) -> Registration:
    root = parse_xml(data, "push registration")
    rid = (root.get("id") or "").strip()
    if not _ID.match(rid):
        raise RegistrationError(
            f"the root element needs an id attribute of letters, digits, '-', '_' or '.', got {rid!r}"
        )
    kind = TOPICS if root.tag == "push-topic-registration" else QUEUES
    return parse(root, rid=rid, kind=kind, name=None)


PUSH = web.AppKey("rest_push_manager", PushManager)


# -- handlers --------------------------------------------------------------------------------
@guarded
async def register(request: web.Request) -> web.StreamResponse:
    svc = request.app[SERVICE]
    mgr = request.app[PUSH]
    engine = svc.engine
    paths = svc.destination(request)
    who = auth.principal(request, engine)
    auth.check(engine, who, Permission.CONSUME, paths.name)
    root = parse_xml(await read_body(request, MAX_XML), "push registration")
    try:
        reg = parse(root, rid=uuid.uuid4().hex, kind=paths.kind, name=paths.name)
    except RegistrationError as e:
        raise fail(web.HTTPBadRequest, f"invalid push registration: {e}") from None
    if engine.security.enabled:
        if paths.kind == TOPICS:
            perm = (
                Permission.CREATE_DURABLE_QUEUE
                if reg.durable
                else Permission.CREATE_NON_DURABLE_QUEUE
            )
            auth.check(engine, who, perm, paths.name)
        elif engine.queue(paths.name) is None:
            auth.check(engine, who, Permission.CREATE_DURABLE_QUEUE, paths.name)
    if len(mgr.pushers) >= svc.cfg.max_consumers:
        raise fail(
            web.HTTPServiceUnavailable, f"too many push registrations ({svc.cfg.max_consumers})"
        )
    p = mgr.pusher(reg)
    p.start()
    mgr.pushers[reg.id] = p
    try:
        await mgr.save(reg)
    except OSError as e:
        del mgr.pushers[reg.id]
        await p.stop(delete_subscription=True)
        raise fail(web.HTTPInsufficientStorage, f"registration not stored: {e}") from None
    location = svc.links(request).url(paths.registration(reg.id))
    return web.Response(status=201, headers={"Location": location})


def _find(request: web.Request) -> Pusher:
    svc = request.app[SERVICE]
    mgr = request.app[PUSH]
    who = auth.principal(request, svc.engine)
    kind = QUEUES if request.path.startswith("/queues/") else TOPICS
    name = request.match_info["name"]
    auth.check(svc.engine, who, Permission.CONSUME, name)
    p = mgr.pushers.get(request.match_info["rid"])
    if p is None or p.reg.kind != kind or p.reg.address != name:
        raise fail(
            web.HTTPNotFound, f"no push registration {request.match_info['rid']!r} on {name!r}"
        )
    return p


@guarded
async def describe(request: web.Request) -> web.StreamResponse:
    p = _find(request)
    return web.Response(
        status=200, body=p.reg.to_xml(with_password=False), content_type="application/xml"
    )


@guarded
async def unregister(request: web.Request) -> web.StreamResponse:
    p = _find(request)
    mgr = request.app[PUSH]
    mgr.pushers.pop(p.reg.id, None)
    await p.stop(delete_subscription=p.reg.kind == TOPICS)
    await mgr.forget(p.reg)
    return web.Response(status=204)


def setup_routes(app: web.Application) -> None:
    for kind, factory in (("queues", "push-consumers"), ("topics", "push-subscriptions")):
        base = f"/{kind}/{{name}}/{factory}"
        app.router.add_post(base, register)
        app.router.add_get(base + "/{rid}", describe)
        app.router.add_delete(base + "/{rid}", unregister)


__all__ = ["PUSH", "PushManager", "setup_routes"]
