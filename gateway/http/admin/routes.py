"""The admin API's routes under ``/admin/api/v1`` (see docs/operations.md for examples).

Each handler logs in the caller (:mod:`.guard`), checks ``manage`` on the address it touches,
does the work through :class:`waystation.core.admin.Admin` (or, to browse, a core session of
the caller's own, so browsing obeys the ``browse`` permission like any client's), and records
the action in the audit log.  Answers are JSON; errors are ``{"error": "..."}``.  Lists of
names come a page at a time (:mod:`.listing`); an action that sends messages somewhere is
checked on where they land (:func:`.guard.require_target`).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from waystation.core.admin import Admin, AdminError
from waystation.core.divert import DivertError
from waystation.core.filter import FilterError
from waystation.core.limits import LimitExceeded
from waystation.core.postoffice import QueueExists, RoutingError
from waystation.core.queue import ANYCAST, Queue
from waystation.core.security import NotAuthorized, Principal
from waystation.core.session import SessionError
from waystation.gateway.http.admin import guard, listing
from waystation.gateway.http.admin.body import read_json
from waystation.gateway.http.admin.runtime import RuntimeRoutes, queue_config
from waystation.gateway.http.admin.views import message_json
from waystation.gateway.http.context import HttpContext
from waystation.gateway.reload import ReloadRefused

BASE = "/admin/api/v1"
MAX_PAGE = 1000

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _ok(data: object, status: int = 200) -> web.Response:
    return web.json_response(data, status=status)


def _ids(data: dict[str, Any]) -> set[int] | None:
    """The ``ids`` of a request: integers, or their decimal text (what a browser must send,
    since ids are beyond what a JavaScript number holds exactly)."""
    ids = data.get("ids")
    if ids is None:
        return None
    if not isinstance(ids, list) or not all(
        (isinstance(i, int) and not isinstance(i, bool)) or (isinstance(i, str) and i.isdigit())
        for i in ids
    ):
        raise guard.error(
            web.HTTPBadRequest, "ids must be a list of message ids (integers or their text)"
        )
    return {int(i) for i in ids}


def _int(request: web.Request, name: str, default: int, hi: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    if not text.isdigit():
        raise guard.error(web.HTTPBadRequest, f"{name} must be a non-negative integer")
    return min(int(text), hi)


class AdminRoutes:
    def __init__(self, ctx: HttpContext) -> None:
        self.ctx = ctx
        self.admin = Admin(ctx.engine)

    def setup(self, app: web.Application) -> None:
        r = app.router
        r.add_get(BASE + "/addresses", self.wrap(self.addresses))
        r.add_get(BASE + "/queues", self.wrap(self.queues))
        r.add_post(BASE + "/queues", self.wrap(self.create_queue))
        q = BASE + "/queues/{name}"
        r.add_get(q, self.wrap(self.queue))
        r.add_delete(q, self.wrap(self.delete_queue))
        r.add_get(q + "/messages", self.wrap(self.browse))
        r.add_delete(q + "/messages", self.wrap(self.purge))
        r.add_delete(q + "/messages/{id:[0-9]+}", self.wrap(self.delete_message))
        r.add_post(q + "/retry", self.wrap(self.retry))
        r.add_post(q + "/move", self.wrap(self.move))
        r.add_post(q + "/pause", self.wrap(self.pause))
        r.add_post(q + "/resume", self.wrap(self.resume))
        r.add_get(BASE + "/connections", self.wrap(self.connections))
        r.add_delete(BASE + "/connections/{id}", self.wrap(self.close_connection))
        r.add_get(BASE + "/bridges", self.wrap(self.bridges))
        r.add_post(BASE + "/reload", self.wrap(self.reload))
        RuntimeRoutes(self).setup(app, BASE)

    def wrap(self, fn: Callable[[web.Request, Principal], Awaitable[web.Response]]) -> Handler:
        """Log in, then map the core's refusals to HTTP answers."""

        async def handler(request: web.Request) -> web.StreamResponse:
            if not self.ctx.engine.started:
                raise guard.error(web.HTTPServiceUnavailable, "node not started")
            principal = await guard.login(request, self.ctx)
            try:
                return await fn(request, principal)
            except AdminError as e:
                raise guard.error(web.HTTPNotFound, str(e)) from None
            except NotAuthorized as e:
                guard.audit.warning("denied %s %s: %s", request.method, request.path, e)
                raise guard.error(web.HTTPForbidden, str(e)) from None
            except QueueExists as e:
                raise guard.error(web.HTTPConflict, str(e)) from None
            except (RoutingError, FilterError, SessionError, DivertError, ValueError) as e:
                raise guard.error(web.HTTPBadRequest, str(e)) from None
            except LimitExceeded as e:
                raise guard.error(web.HTTPServiceUnavailable, str(e)) from None

        return handler

    # -- helpers --------------------------------------------------------------------------
    def _queue(self, request: web.Request, principal: Principal) -> Queue:
        q = self.admin.queue(request.match_info["name"])
        guard.require(request, self.ctx, principal, q.address)
        return q

    def _node_wide(self, request: web.Request, principal: Principal) -> None:
        guard.require(request, self.ctx, principal, guard.NODE_WIDE)

    # -- addresses and queues -------------------------------------------------------------
    async def addresses(self, request: web.Request, principal: Principal) -> web.Response:
        post = self.ctx.engine.post
        found = await listing.page(
            request, list(post.addresses), lambda a: a, self._visible(principal)
        )
        if not found.total:
            self._node_wide(request, principal)  # 403 for someone who may manage nothing
        infos = await listing.address_infos(post, found.items)
        return _ok({"addresses": infos, **found.meta()})

    async def queues(self, request: web.Request, principal: Principal) -> web.Response:
        queues = self.admin.queues()
        found = await listing.page(
            request, queues, lambda q: q.name, self._visible(principal, lambda q: q.address)
        )
        if not found.total:
            self._node_wide(request, principal)
        return _ok({"queues": [self.admin.queue_info(q) for q in found.items], **found.meta()})

    def _visible(
        self, principal: Principal, address: Callable[[Any], str] = str
    ) -> Callable[[Any], bool] | None:
        """Which entries the caller may see; None when all (manage on ``#``: no check each)."""
        if guard.may_manage(self.ctx, principal, guard.NODE_WIDE):
            return None
        return lambda item: guard.may_manage(self.ctx, principal, address(item))

    async def queue(self, request: web.Request, principal: Principal) -> web.Response:
        return _ok(self.admin.queue_info(self._queue(request, principal)))

    async def create_queue(self, request: web.Request, principal: Principal) -> web.Response:
        """A queue checked as a ``[[queues]]`` entry of the config file is."""
        data = await read_json(request)
        data.setdefault("routing", ANYCAST)
        cfg = queue_config(data)
        guard.require(request, self.ctx, principal, cfg.address)
        q = self.admin.create_queue(
            cfg.name,
            cfg.address,
            cfg.routing,
            durable=cfg.durable,
            filter=cfg.filter,
            exclusive=cfg.exclusive,
            max_consumers=cfg.max_consumers,
        )
        guard.done(request, principal, f"created queue {cfg.name!r} on {cfg.address!r}")
        return _ok(self.admin.queue_info(q), 201)

    async def delete_queue(self, request: web.Request, principal: Principal) -> web.Response:
        q = self._queue(request, principal)
        depth = q.depth
        self.admin.delete_queue(q.name)
        guard.done(request, principal, f"deleted queue {q.name!r} ({depth} messages)")
        return _ok({"deleted": q.name, "messages": depth})

    # -- messages -------------------------------------------------------------------------
    async def browse(self, request: web.Request, principal: Principal) -> web.Response:
        q = self._queue(request, principal)
        limit = _int(request, "limit", 100, MAX_PAGE)
        offset = _int(request, "offset", 0, 1 << 31)
        selector = request.query.get("selector") or None
        session = self.ctx.engine.open_session(principal, "admin", guard.remote_of(request))
        try:
            found = session.browse(q.name, selector)
            page = [message_json(m) for m in itertools.islice(found, offset, offset + limit)]
        finally:
            session.close()
        guard.done(request, principal, f"browsed {q.name!r}", logging.INFO)
        return _ok({"queue": q.name, "depth": q.depth, "offset": offset, "messages": page})

    async def purge(self, request: web.Request, principal: Principal) -> web.Response:
        q = self._queue(request, principal)
        n = self.admin.purge(q.name)
        guard.done(request, principal, f"purged {n} messages from {q.name!r}")
        return _ok({"queue": q.name, "removed": n})

    async def delete_message(self, request: web.Request, principal: Principal) -> web.Response:
        q = self._queue(request, principal)
        mid = int(request.match_info["id"])
        if not self.admin.delete_message(q.name, mid):
            raise guard.error(web.HTTPNotFound, f"no waiting message {mid} in {q.name!r}")
        guard.done(request, principal, f"deleted message {mid} from {q.name!r}")
        return _ok({"queue": q.name, "removed": 1})

    async def retry(self, request: web.Request, principal: Principal) -> web.Response:
        q = self._queue(request, principal)
        ids = _ids(await read_json(request))
        for address in sorted(self.admin.retry_targets(q.name, ids)):
            guard.require_target(request, self.ctx, principal, address)  # where they go
        r = self.admin.retry(q.name, ids)
        guard.done(request, principal, f"retried {r.moved} messages from {q.name!r}")
        return _ok({"queue": q.name, "retried": r.moved, "skipped": r.skipped})

    async def move(self, request: web.Request, principal: Principal) -> web.Response:
        q = self._queue(request, principal)
        data = await read_json(request)
        target = data.get("target")
        if not isinstance(target, str) or not target:
            raise guard.error(web.HTTPBadRequest, "target (an address) is required")
        guard.require_target(request, self.ctx, principal, target)
        r = self.admin.move(q.name, target, _ids(data), data.get("selector"))
        guard.done(request, principal, f"moved {r.moved} messages from {q.name!r} to {target!r}")
        return _ok({"queue": q.name, "target": target, "moved": r.moved})

    async def pause(self, request: web.Request, principal: Principal) -> web.Response:
        q = self._queue(request, principal)
        self.admin.pause(q.name)
        guard.done(request, principal, f"paused {q.name!r}")
        return _ok(self.admin.queue_info(q))

    async def resume(self, request: web.Request, principal: Principal) -> web.Response:
        q = self._queue(request, principal)
        self.admin.resume(q.name)
        guard.done(request, principal, f"resumed {q.name!r}")
        return _ok(self.admin.queue_info(q))

    # -- connections and bridges ------------------------------------------------------------
    async def connections(self, request: web.Request, principal: Principal) -> web.Response:
        self._node_wide(request, principal)
        return _ok({"connections": self.admin.sessions()})

    async def close_connection(self, request: web.Request, principal: Principal) -> web.Response:
        self._node_wide(request, principal)
        sid = request.match_info["id"]
        info = self.admin.session(sid).info()
        self.admin.close_session(sid)
        guard.done(request, principal, f"closed connection {sid} of {info['user']!r}")
        return _ok({"closed": sid})

    async def bridges(self, request: web.Request, principal: Principal) -> web.Response:
        self._node_wide(request, principal)
        status: Callable[[], list[dict[str, object]]] | None = self.ctx.bridges
        return _ok({"bridges": status() if status is not None else []})

    async def reload(self, request: web.Request, principal: Principal) -> web.Response:
        """Re-read the node's config file and apply what changed (gateway/reload.py)."""
        self._node_wide(request, principal)
        if self.ctx.reload is None:
            raise guard.error(web.HTTPServiceUnavailable, "this node cannot reload")
        try:
            changes = await self.ctx.reload()
        except ReloadRefused as e:
            guard.audit.warning("reload refused for %r: %s", principal.name, e)
            raise guard.error(web.HTTPBadRequest, str(e)) from None
        guard.done(request, principal, f"reloaded the config: {len(changes)} changes")
        return _ok({"changes": changes})


def setup(app: web.Application, ctx: HttpContext) -> None:
    AdminRoutes(ctx).setup(app)


__all__ = ["BASE", "AdminRoutes", "setup"]
