"""``/health`` and ``/ready``: the two probes an orchestrator asks.

``/health`` answers 200 whenever the process can answer at all (liveness: restart it when
this fails).  ``/ready`` answers 200 only while the node takes traffic: the store recovered,
every listener accepting, and not stopping (readiness: send it clients only then).  The node
says whether it is ready through ``HttpContext.ready`` when it has that field; without it the
engine having started stands in.  Once the listener begins shutting down, ``/ready`` says 503
so a load balancer stops sending before the port closes.
"""

from __future__ import annotations

from aiohttp import web

from waystation.gateway.http.context import HttpContext
from waystation.gateway.http.ops.probes import readiness

DRAINING = web.AppKey("ops_draining", list)  # [bool]: set once the listener shuts down


def is_ready(app: web.Application, ctx: HttpContext) -> tuple[bool, str]:
    return readiness(ctx, app[DRAINING][0])


def setup(app: web.Application, ctx: HttpContext) -> None:
    app[DRAINING] = [False]

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "node": ctx.engine.node_name})

    async def ready(request: web.Request) -> web.Response:
        ok, why = is_ready(request.app, ctx)
        return web.json_response(
            {"status": why, "node": ctx.engine.node_name}, status=200 if ok else 503
        )

    async def draining(app: web.Application) -> None:
        app[DRAINING][0] = True

    app.on_shutdown.insert(0, draining)
    app.router.add_get("/health", health)
    app.router.add_get("/ready", ready)


__all__ = ["is_ready", "setup"]
