"""Admin API routes that change the node's shape at run time, and the console's overview.

Addresses, queues and diverts created here are checked as the config file checks them (the
same pydantic models, then the engine's own refusals: a divert loop, a duplicate name).  They
live in the running engine only: a reload keeps them (it applies what changed *in the file*),
a restart keeps durable queues (the journal holds them) but not addresses without a queue nor
diverts.  Bridges are paused and resumed through the node's bridge manager.
"""

from __future__ import annotations

import inspect
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web
from pydantic import ValidationError

from waystation.config.routing import DivertConfig, QueueConfig, TopicConfig
from waystation.core.engine import DivertSpec
from waystation.core.queue import ANYCAST, MULTICAST
from waystation.core.security import Principal
from waystation.gateway.http.admin import guard
from waystation.gateway.http.admin.body import read_json

if TYPE_CHECKING:
    from waystation.gateway.http.admin.routes import AdminRoutes


def validated(model: type[Any], data: dict[str, Any]) -> Any:
    """``data`` as the config file's ``model``; 400 listing each problem otherwise."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}" for err in e.errors()
        )
        raise guard.error(web.HTTPBadRequest, problems) from None


class RuntimeRoutes:
    def __init__(self, routes: AdminRoutes) -> None:
        self.routes = routes
        self.ctx = routes.ctx
        self.admin = routes.admin
        self.started = time.time()

    def setup(self, app: web.Application, base: str) -> None:
        r, w = app.router, self.routes.wrap
        r.add_get(base + "/overview", w(self.overview))
        r.add_post(base + "/addresses", w(self.create_address))
        r.add_delete(base + "/addresses/{name}", w(self.delete_address))
        r.add_get(base + "/diverts", w(self.diverts))
        r.add_post(base + "/diverts", w(self.create_divert))
        r.add_delete(base + "/diverts/{name}", w(self.delete_divert))
        r.add_post(base + "/bridges/{name}/pause", w(self.pause_bridge))
        r.add_post(base + "/bridges/{name}/resume", w(self.resume_bridge))

    async def overview(self, request: web.Request, principal: Principal) -> web.Response:
        """The console's first screen: totals a client turns into rates between polls."""
        guard.require(request, self.ctx, principal, guard.NODE_WIDE)
        queues = self.admin.queues()
        protocols: dict[str, int] = {}
        for s in self.admin.sessions():
            protocols[str(s["protocol"])] = protocols.get(str(s["protocol"]), 0) + 1
        status = self.ctx.bridges
        return web.json_response(
            {
                "node": self.ctx.engine.node_name,
                "uptime": round(time.time() - self.started, 1),
                "time": time.time(),
                "connections": sum(protocols.values()),
                "by_protocol": protocols,
                "queues": len(queues),
                "messages": sum(q.depth for q in queues),
                "enqueued": sum(q.messages_added for q in queues),
                "acked": sum(q.messages_acked for q in queues),
                "bridges": len(status()) if status is not None else 0,
            }
        )

    # -- addresses ------------------------------------------------------------------------
    async def create_address(self, request: web.Request, principal: Principal) -> web.Response:
        data = await read_json(request)
        routing = str(data.pop("routing", MULTICAST))
        if routing not in (ANYCAST, MULTICAST):
            raise guard.error(web.HTTPBadRequest, "routing must be 'anycast' or 'multicast'")
        cfg = validated(TopicConfig, {"name": data.get("name")})
        guard.require(request, self.ctx, principal, cfg.name)
        info = self.admin.create_address(cfg.name, routing)
        guard.done(request, principal, f"created address {cfg.name!r} ({routing})")
        return web.json_response(info, status=201)

    async def delete_address(self, request: web.Request, principal: Principal) -> web.Response:
        name = request.match_info["name"]
        guard.require(request, self.ctx, principal, name)
        self.admin.delete_address(name)
        guard.done(request, principal, f"deleted address {name!r}")
        return web.json_response({"deleted": name})

    # -- diverts --------------------------------------------------------------------------
    async def diverts(self, request: web.Request, principal: Principal) -> web.Response:
        guard.require(request, self.ctx, principal, guard.NODE_WIDE)
        return web.json_response({"diverts": self.admin.diverts()})

    async def create_divert(self, request: web.Request, principal: Principal) -> web.Response:
        d = validated(DivertConfig, await read_json(request))
        guard.require(request, self.ctx, principal, d.address)
        guard.require_target(request, self.ctx, principal, d.target)
        spec = DivertSpec(d.name, d.address, d.target, d.filter, d.exclusive, d.transformer)
        self.ctx.engine.add_divert(spec)  # DivertError (a loop, a duplicate name): 400
        guard.done(request, principal, f"created divert {d.name!r}: {d.address} -> {d.target}")
        return web.json_response(self.admin.divert_info(d.name), status=201)

    async def delete_divert(self, request: web.Request, principal: Principal) -> web.Response:
        guard.require(request, self.ctx, principal, guard.NODE_WIDE)
        name = request.match_info["name"]
        self.admin.delete_divert(name)
        guard.done(request, principal, f"deleted divert {name!r}")
        return web.json_response({"deleted": name})

    # -- bridges --------------------------------------------------------------------------
    async def pause_bridge(self, request: web.Request, principal: Principal) -> web.Response:
        return await self._bridge(request, principal, "pause")

    async def resume_bridge(self, request: web.Request, principal: Principal) -> web.Response:
        return await self._bridge(request, principal, "resume")

    async def _bridge(self, request: web.Request, principal: Principal, verb: str) -> web.Response:
        guard.require(request, self.ctx, principal, guard.NODE_WIDE)
        control = self.ctx.bridge_control
        if control is None:
            raise guard.error(web.HTTPServiceUnavailable, "bridges cannot be paused on this node")
        name = request.match_info["name"]
        try:
            result = getattr(control, verb)(name)
            if inspect.isawaitable(result):
                await result
        except KeyError:
            raise guard.error(web.HTTPNotFound, f"no bridge {name!r}") from None
        guard.done(request, principal, f"{verb}d bridge {name!r}")
        status = self.ctx.bridges
        found = [b for b in (status() if status is not None else []) if b.get("name") == name]
        return web.json_response(found[0] if found else {"name": name})


def queue_config(data: dict[str, Any]) -> QueueConfig:
    """A queue the API is asked to create, checked as a ``[[queues]]`` entry is."""
    return validated(QueueConfig, data)


__all__ = ["RuntimeRoutes", "queue_config", "validated"]
