"""The web console at ``/console``: one static page (HTML, JS, CSS shipped in this package,
nothing from a CDN) that an operator's browser runs against the admin API.

The page holds no privilege of its own: it asks for a user and password and sends them, as
HTTP Basic, with each admin API call, so it can do exactly what that user's ``manage``
permission allows, and a wrong login is refused by the API as from any other client.  The
browser itself never holds the login (the API sends no Basic challenge), and every change
goes as JSON, which is what the API's browser door (:mod:`..admin.origin`) lets through
from the console's own origin and from no other site.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from waystation.gateway.http.context import HttpContext

STATIC = Path(__file__).resolve().parent / "static"
PATH = "/console"
# The page is only as safe as what it runs: no inline script, nothing from elsewhere.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)


def setup(app: web.Application, ctx: HttpContext) -> None:
    async def page(_: web.Request) -> web.FileResponse:
        return web.FileResponse(
            STATIC / "index.html",
            headers={"Content-Security-Policy": CSP, "Cache-Control": "no-cache"},
        )

    async def to_page(_: web.Request) -> web.Response:
        raise web.HTTPFound(PATH + "/")

    app.router.add_get(PATH, to_page)
    app.router.add_get(PATH + "/", page)
    app.router.add_static(PATH + "/static", STATIC)


__all__ = ["PATH", "setup"]
