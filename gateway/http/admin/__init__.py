"""The admin API under ``/admin/api/v1``: queues, messages, connections and bridges, for
operators holding the ``manage`` permission (HTTP Basic with the node's users).

- :mod:`.origin`: what a browser may send (Host, Origin, JSON bodies), checked first;
- :mod:`.guard`: login, the ``manage`` check and the audit log;
- :mod:`.routes`: the endpoints, doing their work through :class:`waystation.core.admin.Admin`;
- :mod:`.listing`: long lists in pages;
- :mod:`.runtime`: addresses, diverts and bridges changed at run time; the overview;
- :mod:`.views`: a message as JSON.

The web console (:mod:`waystation.gateway.http.console`) is mounted with it.
"""

from __future__ import annotations

from aiohttp import web

from waystation.gateway.http import console
from waystation.gateway.http.admin import origin, routes
from waystation.gateway.http.admin.routes import BASE
from waystation.gateway.http.context import HttpContext


def setup(app: web.Application, ctx: HttpContext) -> None:
    """The admin API and the web console that uses it (``/console``), behind the browser
    door (:mod:`.origin`)."""
    app.middlewares.append(origin.middleware(ctx.cfg, (BASE, console.PATH)))
    routes.setup(app, ctx)
    console.setup(app, ctx)


__all__ = ["BASE", "setup"]
